# Deformable DETR head of the paper: 4 levels, 8 heads, 4 points, 6 + 6 layers, FFN 1024,
# 300 queries, focal loss (alpha 0.25, gamma 2, weight 2), matcher class 2 / bbox 5 / giou 2,
# top-100 detections. The backbone is set by the configs that inherit this.
model = dict(
    type='DeformableDETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=1),
    bbox_head=dict(
        type='DeformableDETRHead', num_classes=80, embed_dims=256, num_queries=300,
        num_feature_levels=4, with_box_refine=False, num_dets=100,
        transformer=dict(num_heads=8, num_points=4, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=1024, dropout=0.1),
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))
