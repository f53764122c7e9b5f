# SegFormer's all-MLP decode head (Xie et al. 2021) on a DINOv2 ViT-B/14 on ADE20K: the
# UperNet recipe beside it (dinov2_vit-b14_upernet_518x518_ade20k.py: the same backbone,
# simple feature pyramid, data and schedule) with the light head instead of UperNet and no
# auxiliary head. Nothing expected is claimed, nothing measured here.
#   python tools/train.py configs/dinov2/dinov2_vit-b14_segformer-head_518x518_ade20k.py
_base_ = ['./dinov2_vit-b14_upernet_518x518_ade20k.py']

model = dict(
    decode_head=dict(
        _delete_=True, type='SegformerHead', proj_type='conv_norm_act',
        in_channels=[256, 256, 256, 256], in_index=[0, 1, 2, 3], channels=768,
        dropout_ratio=0.1, num_classes=150, norm_cfg=_base_.norm_cfg, align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=None)
