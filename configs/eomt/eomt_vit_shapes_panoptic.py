# EoMT (Kerssies et al. 2025) on the panoptic shapes (configs/_base_/datasets/shapes_panoptic.py:
# things circle / rectangle / triangle on stuff bands noise / stripes / gradient, 128x128),
# from scratch: the quickstart's ViT (width 128, 4 layers, 4 heads, 8x8 patches: a 16x16 grid,
# no class token: the ViT the MAE quickstart pre-trains) with 20 queries joined into the last 2
# blocks and masked attention annealed (MaskAnnealingHook), the training settings of its
# semantic twin (eomt_vit_shapes_semantic.py: AdamW 1e-3 clipped, 3,000 iterations, batch 8).
# One model, three outputs evaluated together: panoptic segments (PQ), instance masks (mask
# AP) and the class map (mIoU). Not tuned; no number measured yet.
#   python tools/train.py configs/eomt/eomt_vit_shapes_panoptic.py
#   python tools/test.py configs/eomt/eomt_vit_shapes_panoptic.py CKPT --show-dir vis
_base_ = ['../_base_/datasets/shapes_panoptic.py', '../_base_/seg_runtime.py']

patch_size = 8
model = dict(
    type='EoMT', num_queries=20, num_blocks=2, num_things_classes=3,
    data_preprocessor=dict(type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_val=0,
                           seg_pad_val=255, size_divisor=patch_size, patch_size=patch_size),
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=128, patch_size=patch_size, with_cls_token=False, drop_path_rate=0.0),
    # EoMT's loss weights at 1024 points per mask (the 32x32 masks have 1,024 cells)
    decode_head=dict(type='EoMTHead', num_classes=6,
                     criterion=dict(type='MaskSetCriterion', num_points=1024)),
    # Mask2Former's panoptic rule (object threshold 0.8, overlap 0.8), the 100 best instances
    test_cfg=dict(mode='whole', semantic_on=True, panoptic_on=True, instance_on=True))

train_dataloader = dict(sampler=dict(type='InfiniteSampler', shuffle=True))
data_root = 'data/shapes_panoptic/'
val_evaluator = [
    dict(type='CocoPanopticMetric', ann_file=data_root + 'annotations/panoptic_val.json',
         seg_prefix=data_root + 'annotations/panoptic_val/'),
    dict(type='CocoMetric', metric='segm', ann_file=data_root + 'annotations/instances_val.json'),
    dict(type='IoUMetric', iou_metrics=['mIoU']),
]
test_evaluator = val_evaluator

max_iters = 3000
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=500)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'norm': dict(decay_mult=0.)}),
    clip_grad=dict(max_norm=1.0, norm_type=2))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=100, end=max_iters),
]
custom_hooks = [dict(type='NonFiniteLossHook'), dict(type='ProgressBarHook'),
                dict(type='MaskAnnealingHook')]
default_hooks = dict(
    logger=dict(interval=20),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=500, max_keep_ckpts=2))
randomness = dict(seed=0)
