# SegFormer-B3 on ADE20K: the B0 recipe with the B3 encoder (widths 64/128/320/512)
# and a 768-wide decoder. ADE20K mIoU single-scale (MMSegmentation): 47.82.
_base_ = ['./segformer_mit-b0_8xb2-160k_ade20k-512x512.py']

pretrained = 'checkpoints/mit_b3.pth'
model = dict(
    backbone=dict(arch='b3', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512], channels=768))
