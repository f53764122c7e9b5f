# ViT paper App. D.4 study on the segmentation twin: position embedding 'learned_2d'
# (learned X- and Y-embeddings of D/2 each, concatenated per patch),
# added once, after the patch embedding.
# Everything else is configs/quickstart/vit_seg_shapes.py (parent: the ViT + SETR-Naive
# segmentation twin of the detection study, mIoU on the shapes class maps).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-learned_2d-stem.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='learned_2d', placement='stem')))
