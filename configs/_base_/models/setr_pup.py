# SETR-PUP (Zheng et al. 2021) on ViT-L/16 (setr_vit-l16.py): the last layer's tokens ->
# LayerNorm -> 4 x (3x3 conv-BN-ReLU, x2 upsample) -> classifier; auxiliary heads
# (2 x (3x3 conv-BN-ReLU, x4)) on layers 10, 15 and 20 (0-based 9, 14, 19), loss weight 0.4,
# as in mmseg's ADE20K zoo config.
_base_ = ['./setr_vit-l16.py']

model = dict(
    backbone=dict(with_cls_token=True, out_indices=(9, 14, 19, 23)),
    decode_head=dict(
        type='SETRUPHead', in_channels=1024, channels=256, in_index=3, num_classes=150,
        dropout_ratio=0, norm_cfg=_base_.norm_cfg, num_convs=4, up_scale=2, kernel_size=3,
        align_corners=False, loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=[
        dict(type='SETRUPHead', in_channels=1024, channels=256, in_index=i, num_classes=150,
             dropout_ratio=0, norm_cfg=_base_.norm_cfg, num_convs=2, up_scale=4, kernel_size=3,
             align_corners=False, loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))
        for i in (0, 1, 2)
    ])
