# Quickstart: Deformable DETR (Zhu et al. 2021) on the small ViT of detr_vit_shapes.py, with a
# simple feature pyramid (ViTDet) making strides 8 and 16 from the ViT's stride-8 map and
# the head adding a third level (stride 32) by a 3x3 stride-2 conv: 16x16 + 8x8 + 4x4 = 336
# encoder tokens. (A stride-4 level, scale 2.0, would add 1,024 tokens: ~6x slower per step
# on CPU.) Same data as detr_vit_shapes_vanilla.py; a schedule that fits 20 minutes on 2 CPU cores.
#   python tools/train.py configs/quickstart/deformable_detr_vit_shapes.py
#   python tools/train.py configs/quickstart/deformable_detr_vit_shapes.py --minutes 20  (on a clock)
_base_ = ['./detr_vit_shapes_vanilla.py']  # its data and runtime; the head replaced

embed_dims = 128
model = dict(
    type='DeformableDETR',
    neck=dict(type='SimpleFeaturePyramid', in_channels=128, out_channels=embed_dims,
              scale_factors=(1.0, 0.5), in_stride=8),
    bbox_head=dict(
        _delete_=True,
        type='DeformableDETRHead', num_classes=3, embed_dims=embed_dims, num_queries=30,
        num_feature_levels=3, with_box_refine=True, num_dets=100,
        transformer=dict(num_heads=4, num_points=4, num_encoder_layers=2, num_decoder_layers=3,
                         feedforward_channels=512, dropout=0.0),
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))

# as the paper: sampling offsets and reference points learn 10x slower
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'sampling_offsets': dict(lr_mult=0.1),
                                    'reference_points': dict(lr_mult=0.1)}))

# 800 iterations (about 20 minutes on 2 CPU cores, measured in docs/benchmarks.md), the
# learning rate divided by 10 for the last 100: the step that lifts AP at the end of a run
max_iters = 800
train_cfg = dict(max_iters=max_iters, val_interval=200)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[700], gamma=0.1),
]
default_hooks = dict(checkpoint=dict(interval=200))
