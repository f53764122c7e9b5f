# Position embedding 'rope' on the quickstart model, beside the ViT paper's App. D.4 study:
# 2D rotary embedding of queries and keys inside every layer's attention (EVA-02's
# convention: patch-grid coordinates, theta 1e4, interleaved pairs; no parameters, so one
# rotation serves every layer). DINOv3's: convention='dinov3'; RoPE-Mixed's learned
# per-head frequencies: mixed=True.
# Everything else is configs/quickstart/detr_vit_shapes.py (parent: DETR on a ViT that learns).
#   python tools/train.py configs/studies/vit_pe/detr_vit_shapes_pe-rope-every_layer.py
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='rope', placement='every_layer',
                                          convention='eva02')))
