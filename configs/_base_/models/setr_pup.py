# SETR-PUP (Zheng et al. 2021) on ViT-L/16: the last layer's tokens -> LayerNorm ->
# 4 x (3x3 conv-BN-ReLU, x2 upsample) -> classifier; auxiliary heads (2 x (conv, x2))
# on layers 10, 15 and 20 (0-based 9, 14, 19), loss weight 0.4.
norm_cfg = dict(type='SyncBN', requires_grad=True)  # plain BN on one process
data_preprocessor = dict(
    type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True, pad_val=0, seg_pad_val=255,
    size_divisor=16)  # ViT needs whole patches, also in sliding windows at image borders
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        type='VisionTransformer', arch='L', img_size=512, patch_size=16, with_cls_token=True,
        out_indices=(9, 14, 19, 23), drop_rate=0.1, final_norm=False,
        interpolate_mode='bilinear'),
    decode_head=dict(
        type='SETRUPHead', in_channels=1024, channels=256, in_index=3, num_classes=150,
        dropout_ratio=0, norm_cfg=norm_cfg, num_convs=4, up_scale=2, kernel_size=3,
        align_corners=False, loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=[
        dict(type='SETRUPHead', in_channels=1024, channels=256, in_index=i, num_classes=150,
             dropout_ratio=0, norm_cfg=norm_cfg, num_convs=2, up_scale=2, kernel_size=3,
             align_corners=False, loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))
        for i in (0, 1, 2)
    ],
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))
