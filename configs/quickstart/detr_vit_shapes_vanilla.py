# Vanilla DETR (Carion et al. 2020) on a small ViT, on the procedural shapes data (generated
# under data/shapes/ on first use): the base of the shapes detection configs (data, schedule),
# kept as the model that does NOT converge in a CPU budget. It stays on its plateau (every
# query predicting the average box): its curve beside the others' is in docs/detr_family.md.
# For DETR on a ViT that learns use configs/quickstart/detr_vit_shapes.py
# (Plain-DETR's head); this model learns its 16 training images in detr_vit_shapes_overfit16.py.
#   python tools/train.py configs/quickstart/detr_vit_shapes_vanilla.py
_base_ = ['../_base_/models/detr.py', '../_base_/default_runtime.py']

data_root = 'data/shapes/'
img_size = 128
patch_size = 8
shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=24, max_size=64, seed=0)
classes = ('circle', 'rectangle', 'triangle')

# DETR (models/detr.py) shrunk: a 4-layer ViT of width 128 on 8x8 patches, 20 queries,
# 2 + 3 transformer layers, no dropout. The data preprocessor counts an image's tokens in
# the ViT's patches: one over max_tokens (65,536 by default) is refused, naming its file.
model = dict(
    data_preprocessor=dict(pad_size_divisor=patch_size, patch_size=patch_size),
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=img_size, patch_size=patch_size, with_cls_token=False, drop_path_rate=0.0),
    bbox_head=dict(
        num_classes=3, embed_dims=128, num_queries=20,
        transformer=dict(num_heads=4, num_encoder_layers=2, num_decoder_layers=3,
                         feedforward_channels=512, dropout=0.0)))

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
# The generated images are all img_size x img_size, the size training sees; other images are
# resized to fit it (a no-op on the generated ones). Boxes are predicted in pixels of the
# original image (divided by scale_factor), where CocoMetric scores them.
test_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='Resize', scale=(img_size, img_size), keep_ratio=True),
    dict(type='PackDetInputs'),
]

train_dataloader = dict(
    batch_size=16, num_workers=1, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='ShapesDataset', data_root=data_root, metainfo=dict(classes=classes),
        ann_file='annotations/instances_train.json', data_prefix=dict(img='train/'),
        filter_cfg=dict(filter_empty_gt=True), pipeline=train_pipeline,
        generate=dict(shapes, num_images=4000, seed=0)))
val_dataloader = dict(
    batch_size=16, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='ShapesDataset', data_root=data_root, metainfo=dict(classes=classes),
        ann_file='annotations/instances_val.json', data_prefix=dict(img='val/'),
        test_mode=True, pipeline=test_pipeline,
        generate=dict(shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader
val_evaluator = dict(type='CocoMetric', ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator

max_iters = 2400
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=400)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, weight_decay=1e-4),
    clip_grad=dict(max_norm=0.1, norm_type=2))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters,
         milestones=[int(max_iters * 0.8)], gamma=0.1),
]

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False, interval=400, max_keep_ckpts=2))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
