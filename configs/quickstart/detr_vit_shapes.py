# Quickstart: DETR on a plain ViT that learns -- the headline's architecture on the shapes data.
# One single-scale map of the small ViT of detr_vit_shapes_vanilla.py (stride 8, 16x16 tokens)
# through a one-level ViTDet simple feature pyramid (a 1x1 and a 3x3 convolution, no
# resampling), no deformable attention: two DETR encoder layers over the map (this 4-layer ViT
# trains from scratch; Plain-DETR has none on its large pre-trained backbones) and a DETR
# decoder whose cross-attention is global, biased by each query's box (BoxRPB), as Plain-DETR
# (Lin et al. 2023), the bias starting local (local_init: the heads look at the box, near its
# corners and along its edges in turn, local_pattern='corners', as deformable attention starts
# its heads' samples in different directions around the reference; learned from there); with
# two-stage proposals from the map, mixed query selection, per-layer box refinement (look
# forward twice) and a one-to-many branch (H-DETR's hybrid matching), all switchable in
# bbox_head (docs/detr_family.md). Data and batch 16 of the Deformable quickstart; twice its
# 800 iterations.
#   python tools/train.py configs/quickstart/detr_vit_shapes.py
_base_ = ['./detr_vit_shapes_vanilla.py']

embed_dims = 128
model = dict(
    neck=dict(type='SimpleFeaturePyramid', in_channels=128, out_channels=embed_dims,
              scale_factors=(1.0,), in_stride=8),
    bbox_head=dict(
        _delete_=True,
        type='PlainDETRHead', num_classes=3, embed_dims=embed_dims, num_queries=30, num_heads=4,
        num_encoder_layers=2, num_decoder_layers=3, feedforward_channels=512, dropout=0.0,
        box_rpb=dict(hidden_dims=128, stride=8, mode='log8', local_init=4.0,
                     local_pattern='corners'),
        as_two_stage=True, mixed_selection=True, look_forward_twice=True,
        one_to_many=dict(num_queries=120, k=4, loss_weight=1.0),
        num_dets=100,
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))

# 1,600 iterations, the learning rate divided by 10 for the last 200
max_iters = 1600
train_cfg = dict(max_iters=max_iters, val_interval=200)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[1400],
         gamma=0.1),
]
default_hooks = dict(checkpoint=dict(interval=200))
