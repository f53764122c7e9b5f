# SETR-MLA (Zheng et al. 2021) on ViT-L/16 (setr_vit-l16.py): layers 6, 12, 18, 24
# (0-based 5, 11, 17, 23, no cls token) -> MLA neck (per level LayerNorm -> 1x1 conv to
# 256, top-down cumulative sum, 3x3 conv) -> MLA head (per level two 3x3 convs to 128,
# x4, concat to 512, classify); one auxiliary classifier per MLA level, loss weight 0.4
# (mmseg's FCNHead(num_convs=0): a bare 1x1 classifier). Levels run shallow to deep here;
# mmseg's MLANeck returns them deepest first, which the checkpoint converter accounts for.
_base_ = ['./setr_vit-l16.py']

model = dict(
    backbone=dict(with_cls_token=False, out_indices=(5, 11, 17, 23)),
    neck=dict(type='MLANeck', in_channels=[1024, 1024, 1024, 1024], out_channels=256,
              norm_cfg=_base_.norm_cfg, act_cfg=dict(type='ReLU')),
    decode_head=dict(
        type='SETRMLAHead', in_channels=(256, 256, 256, 256), in_index=(0, 1, 2, 3),
        channels=512, mla_channels=128, up_scale=4, num_classes=150, dropout_ratio=0,
        norm_cfg=_base_.norm_cfg, align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=[
        dict(type='SETRUPHead', in_channels=256, channels=256, in_index=i, num_classes=150,
             dropout_ratio=0, norm_layer=None, num_convs=0, align_corners=False,
             loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))
        for i in (0, 1, 2, 3)
    ])
