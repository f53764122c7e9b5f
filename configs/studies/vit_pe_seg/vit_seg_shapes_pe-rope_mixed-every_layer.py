# Position embedding RoPE-Mixed (Heo et al. 2024) on the segmentation twin vit_seg_shapes.py
# (mIoU): 2-D rotary embedding with learned per-head frequencies (EVA-02's coordinates and pairs
# otherwise), each layer its own frequencies. A row of its own beside fixed-frequency RoPE
# (vit_seg_shapes_pe-rope-every_layer.py).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-rope_mixed-every_layer.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='rope', placement='every_layer',
                                          convention='eva02', mixed=True)))
