# ViT paper App. D.4 study on the quickstart model: position embedding 'learned_1d'
# (one learned vector per patch, raster order (the ViT default)),
# added before every encoder layer, each layer its own.
# Everything else is configs/quickstart/detr_vit_shapes.py (parent: DETR on a ViT that learns).
#   python tools/train.py configs/studies/vit_pe/detr_vit_shapes_pe-learned_1d-every_layer.py
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='learned_1d', placement='every_layer')))
