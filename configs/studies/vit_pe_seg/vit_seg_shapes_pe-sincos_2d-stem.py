# ViT paper App. D.4 study on the segmentation twin: position embedding 'sincos_2d'
# (fixed 2D sine-cosine codes (MAE),
# no parameters), added once, after the patch embedding.
# Everything else is configs/quickstart/vit_seg_shapes.py (parent: the ViT + SETR-Naive
# segmentation twin of the detection study, mIoU on the shapes class maps).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-sincos_2d-stem.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='sincos_2d', placement='stem')))
