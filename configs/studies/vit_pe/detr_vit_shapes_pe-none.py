# ViT paper App. D.4 study on the quickstart model: position embedding 'none'
# (no position information at all).
# Everything else is configs/quickstart/detr_vit_shapes.py (parent: DETR on a ViT that learns).
#   python tools/train.py configs/studies/vit_pe/detr_vit_shapes_pe-none.py
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='none')))
