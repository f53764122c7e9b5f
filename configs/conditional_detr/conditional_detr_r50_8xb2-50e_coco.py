# Conditional DETR (Meng et al. 2021), ResNet-50, COCO 2017: the paper's 50-epoch recipe
# (8 GPUs x 2 images; paper AP 40.9). DETR's single-map detector with the conditional
# decoder: 300 queries, each with a reference point; in cross-attention the content query
# is concatenated with a spatial query sine(reference) * T(decoder embedding) per head.
# Sigmoid focal loss (alpha 0.25, gamma 2, weight 2), L1 5, GIoU 2; Hungarian costs class 2
# (focal) / L1 5 / GIoU 2; top-100 (query, class) detections. AdamW 1e-4 (backbone 1e-5),
# weight decay 1e-4, gradient clip 0.1, lr / 10 after epoch 40.
#   python tools/train.py configs/conditional_detr/conditional_detr_r50_8xb2-50e_coco.py
# HF transformers' files (ConditionalDetrForObjectDetection, model.safetensors) load as they
# are (densevit/checkpoint/conditional_detr.py); the Hub's microsoft/conditional-detr-resnet-50
# has 91 logits indexed by COCO category id: set model.bbox_head.num_classes=91 to load it.
# Proven equal to HF's model: tests/models/test_conditional_detr_vs_hf.py (docs/detr_family.md).
_base_ = [
    '../_base_/datasets/coco_detection.py',
    '../_base_/schedules/detr_300e.py',
    '../_base_/default_runtime.py',
]

pretrained = 'checkpoints/resnet50-0676ba61.pth'  # torchvision's ImageNet ResNet-50
model = dict(
    type='DETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=1),
    # as DETR: BatchNorm frozen everywhere, stem + layer1 frozen
    backbone=dict(
        type='ResNet', depth=50, out_indices=(3,), frozen_stages=1,
        norm_cfg=dict(type='FrozenBN'), style='pytorch',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        type='ConditionalDETRHead', num_classes=80, embed_dims=256, num_queries=300,
        transformer=dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=2048, dropout=0.1),
        positional_encoding=dict(temperature=10000),
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0)),
        aux_loss=True,
        num_dets=100))

max_epochs = 50
train_cfg = dict(max_epochs=max_epochs, val_interval=5)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[40], gamma=0.1)
]
