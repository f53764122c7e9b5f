# SegFormer-B3 on ADE20K: the B0 recipe with the B3 encoder (widths 64/128/320/512)
# and, as MMSegmentation's config of the same name, a 256-wide decoder with conv-BN-ReLU
# projections (its zoo checkpoint loads). ADE20K mIoU single-scale (MMSegmentation): 47.82.
# The paper's, official NVlabs and Hugging Face B2-B5 models have a 768-wide Linear head:
#   --cfg-options model.decode_head.proj_type=linear model.decode_head.channels=768
_base_ = ['./segformer_mit-b0_8xb2-160k_ade20k-512x512.py']

pretrained = 'checkpoints/mit_b3.pth'
model = dict(
    backbone=dict(arch='b3', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512], channels=256))
