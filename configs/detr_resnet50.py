# DETR (Carion et al. 2020) with a ResNet-50 backbone, COCO 2017, the paper's 300-epoch
# recipe (8 GPUs x 2 images; val AP 42.0 after 500 epochs, about 40 after 150-300).
#   python tools/train.py configs/detr_resnet50.py
# The backbone starts from torchvision's ImageNet ResNet-50 (no renaming needed), e.g.
#   https://download.pytorch.org/models/resnet50-0676ba61.pth -> checkpoints/
# As DETR: BatchNorm frozen everywhere, stem + layer1 frozen, backbone lr x0.1
# (detr_300e's paramwise_cfg). For DC5: strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2).
_base_ = [
    '_base_/datasets/coco_detection.py',
    '_base_/schedules/detr_300e.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/resnet50-0676ba61.pth'
model = dict(
    type='DETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=1),
    backbone=dict(
        type='ResNet', depth=50, out_indices=(3,), frozen_stages=1,
        norm_cfg=dict(type='FrozenBN'), style='pytorch',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        type='DETRHead', num_classes=80, embed_dims=256, num_queries=100,
        transformer=dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=2048, dropout=0.1),
        positional_encoding=dict(type='sine_2d', num_feats=128, temperature=10000,
                                 normalize=True),
        criterion=dict(type='SetCriterion',
                       matcher=dict(type='HungarianMatcher', cost_class=1.0, cost_bbox=5.0,
                                    cost_giou=2.0),
                       loss_weights=dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0),
                       no_object_weight=0.1),
        aux_loss=True))
