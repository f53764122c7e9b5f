# SegFormer's all-MLP head on a Swin-T encoder (any backbone goes with any head): the
# B0 recipe with Swin-T's four stages (96/192/384/768 channels, strides 4..32) and a
# 768-wide decoder with the paper's Linear projections. Not a published model: no
# reference number to match.
_base_ = ['./segformer_mit-b0_8xb2-160k_ade20k-512x512.py']

pretrained = 'checkpoints/swin_tiny_patch4_window7_224.pth'
model = dict(
    backbone=dict(_delete_=True, type='SwinTransformer', arch='tiny', drop_path_rate=0.2,
                  out_indices=(0, 1, 2, 3),
                  always_shift=True,  # as mmseg's Swin (see configs/detr_swin-t.py)
                  init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(proj_type='linear', in_channels=[96, 192, 384, 768], channels=768))
