# DETR (Carion et al. 2020) with a ResNet-50 backbone, COCO 2017, the paper's 300-epoch
# recipe (8 GPUs x 2 images; val AP 42.0 after 500 epochs, about 40 after 150-300).
#   python tools/train.py configs/detr_resnet50.py
# The backbone starts from torchvision's ImageNet ResNet-50 (no renaming needed), e.g.
#   https://download.pytorch.org/models/resnet50-0676ba61.pth -> checkpoints/
# As DETR: BatchNorm frozen everywhere, stem + layer1 frozen, backbone lr x0.1
# (detr_300e's paramwise_cfg). For DC5: strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2).
_base_ = [
    '_base_/models/detr.py',
    '_base_/datasets/coco_detection.py',
    '_base_/schedules/detr_300e.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/resnet50-0676ba61.pth'
model = dict(
    backbone=dict(
        type='ResNet', depth=50, out_indices=(3,), frozen_stages=1,
        norm_cfg=dict(type='FrozenBN'), style='pytorch',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        positional_encoding=dict(type='sine_2d', num_feats=128, temperature=10000,
                                 normalize=True),
        aux_loss=True))
