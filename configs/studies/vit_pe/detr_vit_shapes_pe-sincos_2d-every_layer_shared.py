# ViT paper App. D.4 study on the quickstart model: position embedding 'sincos_2d'
# (fixed 2D sine-cosine codes (MAE),
# no parameters), added before every encoder layer, one shared.
# Everything else is configs/quickstart/detr_vit_shapes.py (parent: DETR on a ViT that learns).
#   python tools/train.py configs/studies/vit_pe/detr_vit_shapes_pe-sincos_2d-every_layer_shared.py
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='sincos_2d', placement='every_layer_shared')))
