# Quickstart for segmentation: SegFormer-B0, from scratch, on the procedural shapes as
# class maps (background, circle, rectangle, triangle; generated under
# data/shapes_seg96/ on first use), 96x96 images, 10 minutes on a 2-core CPU.
#   python tools/train.py configs/quickstart/segformer_shapes.py
#   python tools/test.py configs/quickstart/segformer_shapes.py \
#       work_dirs/segformer_shapes/iter_3500.pth --show-dir show
_base_ = ['../_base_/models/segformer_mit-b0.py', '../_base_/seg_runtime.py']

data_root = 'data/shapes_seg96/'
img_size = 96
# whole shapes (none cut by the border or hidden by another), 18-48 px across: every
# pixel's class is decided by its own shape's outline. 96x96 learned fastest of
# 64 / 96 / 128 in 5-minute trials (at 128 the shapes outgrow the early stages' reach).
shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=18, max_size=48,
              inside=True, min_visible=1.0)
norm_cfg = dict(type='BN', requires_grad=True)  # one process: plain BatchNorm

# SegFormer-B0 (models/segformer_mit-b0.py) without drop path or dropout, a 128-wide decoder
# with the paper's Linear projections per level (the base file has MMSegmentation's
# conv-BN-ReLU ones)
model = dict(
    # the official code's LayerNorm eps mix (trained from scratch; the measured runs used it)
    backbone=dict(drop_path_rate=0.0, layer_norm_eps=None),
    decode_head=dict(
        proj_type='linear', channels=128, dropout_ratio=0.0, num_classes=4, norm_cfg=norm_cfg,
        # Dice beside cross-entropy: the shapes cover 15% of the pixels, and Dice scores
        # each class by overlap whatever its area (see densevit/models/losses/dice_loss.py)
        loss_decode=[dict(type='CrossEntropyLoss', loss_weight=1.0),
                     dict(type='DiceLoss', loss_weight=1.0)]))

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadSegAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
# The generated images are all img_size x img_size, the size training sees; other images are
# resized to fit it (a no-op on the generated ones). Labels are loaded after the resize, at
# the original size, where predictions are resized back to and IoUMetric compares them.
test_pipeline = [
    dict(type='LoadImage'),
    dict(type='Resize', scale=(img_size, img_size), keep_ratio=True),
    dict(type='LoadSegAnnotations'),
    dict(type='PackSegInputs'),
]

train_dataloader = dict(
    batch_size=8, num_workers=1, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='ShapesSegDataset', data_root=data_root,
        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline, generate=dict(shapes, num_images=4000, seed=0)))
val_dataloader = dict(
    batch_size=8, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='ShapesSegDataset', data_root=data_root,
        data_prefix=dict(img_path='images/validation', seg_map_path='annotations/validation'),
        test_mode=True, pipeline=test_pipeline, generate=dict(shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

max_iters = 3500  # about what 10 minutes allow on 2 cores: the learning rate has decayed by then
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=500)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

# SegFormer's AdamW (no decay on norms) with a from-scratch learning rate and one rate
# for all: in 5-minute one-core trials lr 2e-3 reached 60-75 mIoU, 1e-3 52, and
# SegFormer's head lr x10 (head at 5e-3 or more) 41-44. Batch 8: on 2 threads it
# trains 1.3x more images per second than batch 4. Fused AdamW: one kernel per tensor.
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-3, betas=(0.9, 0.999), weight_decay=0.01, fused=True),
    paramwise_cfg=dict(custom_keys={'norm': dict(decay_mult=0.)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=100, end=max_iters),
]

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=500, max_keep_ckpts=2))
randomness = dict(seed=0)
