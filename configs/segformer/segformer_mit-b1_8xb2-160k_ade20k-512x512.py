# SegFormer-B1 on ADE20K: the B0 recipe with the B1 encoder (widths 64/128/320/512)
# and a 256-wide decoder (conv-BN-ReLU projections, as MMSegmentation's config of the same
# name; the official / Hugging Face model: --cfg-options model.decode_head.proj_type=linear).
# ADE20K mIoU single-scale (MMSegmentation): 40.97.
_base_ = ['./segformer_mit-b0_8xb2-160k_ade20k-512x512.py']

pretrained = 'checkpoints/mit_b1.pth'
model = dict(
    backbone=dict(arch='b1', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512], channels=256))
