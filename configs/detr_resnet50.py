# DETR (Carion et al. 2020) with a ResNet-50 backbone, COCO 2017, the paper's 300-epoch
# recipe (8 GPUs x 2 images; val AP 42.0 after 500 epochs, about 40 after 150-300).
#   python tools/train.py configs/detr_resnet50.py
# The backbone starts from torchvision's ImageNet ResNet-50 (no renaming needed), e.g.
#   https://download.pytorch.org/models/resnet50-0676ba61.pth -> checkpoints/
# As DETR: BatchNorm frozen everywhere, stem + layer1 frozen, backbone lr x0.1
# (detr_300e's paramwise_cfg). For DC5: strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2).
# The model and test settings are MMDetection 3.x's configs/detr/detr_r50_8xb2-150e_coco.py
# (80 classes + no object, 100 queries, the best 100 kept per image, Resize to (1333, 800)
# keeping the ratio, the same normalisation, no padding multiple), so its zoo checkpoints
# evaluate as they are (the keys are converted on load; see densevit/checkpoint/detr.py):
#   python tools/test.py configs/detr_resnet50.py \
#       checkpoints/detr_r50_8xb2-150e_coco_20221023_153551-436d03e8.pth   (mmdet: box AP 39.9)
# Training stays the paper's (mmdet: 150 epochs, lr dropped at 100, images < 32 px dropped).
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
        aux_loss=True,
        num_dets=100))  # mmdet's test_cfg.max_per_img: with 100 queries, all, by score
