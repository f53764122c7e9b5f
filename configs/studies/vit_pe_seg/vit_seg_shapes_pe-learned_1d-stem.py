# ViT paper App. D.4 study on the segmentation twin: position embedding 'learned_1d'
# (one learned vector per patch, raster order (the ViT default)),
# added once, after the patch embedding.
# Everything else is configs/quickstart/vit_seg_shapes.py (parent: the ViT + SETR-Naive
# segmentation twin of the detection study, mIoU on the shapes class maps).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-learned_1d-stem.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='learned_1d', placement='stem')))
