# What Conditional DETR (Meng et al. 2021) and DAB-DETR (Liu et al. 2022), both with a
# ResNet-50, share: DETR's single-map detector with its frozen backbone, 300 queries, COCO
# sizes (80 classes, width 256, 6 + 6 layers, 8 heads, FFN 2048), sigmoid focal loss (alpha
# 0.25, gamma 2), L1 5, GIoU 2, Hungarian costs class 2 (focal) / L1 5 / GIoU 2, a loss on
# every decoder layer. The head type, its dropout and position-encoding temperature, the
# classification loss weight and the number of detections are set by the configs in
# configs/conditional_detr/ and configs/dab_detr/.
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
        num_classes=80, embed_dims=256, num_queries=300,
        transformer=dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=2048),
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_bbox=5.0, loss_iou=2.0)),
        aux_loss=True))
