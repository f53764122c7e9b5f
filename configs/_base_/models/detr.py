# DETR (Carion et al. 2020): transformer encoder-decoder on one feature map, 100 queries,
# Hungarian matching (class 1 / L1 box 5 / GIoU 2), the same loss weights, "no object"
# weight 0.1. COCO sizes: 80 classes, width 256, 6 + 6 layers, 8 heads, FFN 2048.
# The backbone is set by the configs that inherit this; so are the sine position
# encoding's arguments and aux_loss (where a config states them: the head's defaults
# are sine_2d over embed_dims / 2 per axis and aux_loss=True).
model = dict(
    type='DETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=1),
    bbox_head=dict(
        type='DETRHead', num_classes=80, embed_dims=256, num_queries=100,
        transformer=dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=2048, dropout=0.1),
        criterion=dict(type='SetCriterion',
                       matcher=dict(type='HungarianMatcher', cost_class=1.0, cost_bbox=5.0,
                                    cost_giou=2.0),
                       loss_weights=dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0),
                       no_object_weight=0.1)))
