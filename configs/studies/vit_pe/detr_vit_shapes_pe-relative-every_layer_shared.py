# ViT paper App. D.4 study on the quickstart model: position embedding 'relative'
# (learned per-head bias for each 2D query-key offset, added to the attention logits),
# in every layer's attention, one shared table.
# Everything else is configs/quickstart/detr_vit_shapes.py (parent: DETR on a ViT that learns).
#   python tools/train.py configs/studies/vit_pe/detr_vit_shapes_pe-relative-every_layer_shared.py
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='relative', placement='every_layer_shared')))
