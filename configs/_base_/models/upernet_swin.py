# UperNet (Xiao et al. 2018) on Swin-T (Liu et al. 2021), as MMSegmentation's
# configs/_base_/models/upernet_swin.py builds it: a UPerHead on the four stages (pyramid
# pooling with 1, 2, 3 and 6 bins on the deepest, a 512-wide FPN) and an FCN auxiliary head
# on stage 3 (loss weight 0.4, training only). Swin shifts every second block whatever the
# map size, as mmseg's Swin (always_shift=True). Preprocessor and whole-image test:
# seg_encoder_decoder.py. The final config sets num_classes, the preprocessor's size and the
# pretrained weights.
_base_ = ['./seg_encoder_decoder.py']

model = dict(
    backbone=dict(
        type='SwinTransformer', arch='tiny', pretrain_img_size=224, patch_size=4, window_size=7,
        mlp_ratio=4, qkv_bias=True, drop_path_rate=0.3, use_abs_pos_embed=False,
        out_indices=(0, 1, 2, 3), always_shift=True),
    decode_head=dict(
        type='UPerHead', in_channels=[96, 192, 384, 768], in_index=[0, 1, 2, 3],
        pool_scales=(1, 2, 3, 6), channels=512, dropout_ratio=0.1, num_classes=19,
        norm_cfg=_base_.norm_cfg, align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=dict(
        type='FCNHead', in_channels=384, in_index=2, channels=256, num_convs=1,
        concat_input=False, dropout_ratio=0.1, num_classes=19, norm_cfg=_base_.norm_cfg,
        align_corners=False, loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4)))
