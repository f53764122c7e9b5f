# Position embedding 'rope' on the segmentation twin, beside the ViT paper's App. D.4 study:
# 2D rotary embedding of queries and keys inside every layer's attention (EVA-02's
# convention: patch-grid coordinates, theta 1e4, interleaved pairs; no parameters, so one
# rotation serves every layer). DINOv3's: convention='dinov3'; RoPE-Mixed's learned
# per-head frequencies: mixed=True.
# Everything else is configs/quickstart/vit_seg_shapes.py (parent: the ViT + SETR-Naive
# segmentation twin of the detection study, mIoU on the shapes class maps).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-rope-every_layer.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='rope', placement='every_layer',
                                          convention='eva02')))
