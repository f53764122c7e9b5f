# Quickstart: MAE pre-training (He et al. 2022) of the small ViT that the detection quickstarts
# use (configs/quickstart/detr_vit_shapes.py, deformable_detr_vit_shapes.py: width 128, 4 layers,
# 8x8 patches, no class token, learned 1D positions), on the shapes images without their labels
# (generated under data/shapes/ on first use, the same files as the detection quickstarts'), so
# its backbone.* weights load into that detector. 75% of the 16x16 patches are masked; a
# 1-layer decoder of width 16 reconstructs their pixels. 4,000 iterations (26-36 minutes on
# one thread here, docs/pretraining.md).
#   python tools/train.py configs/mae/mae_vit_shapes_quickstart.py
#   python tools/analysis/mae_reconstruction.py configs/mae/mae_vit_shapes_quickstart.py \
#       work_dirs/mae_vit_shapes_quickstart/iter_4000.pth --num 8 --out mae_shapes.png
_base_ = ['../_base_/models/mae.py', '../_base_/default_runtime.py']

data_root = 'data/shapes/'
img_size = 128
# as configs/quickstart/detr_vit_shapes.py (the same arguments make the same images)
shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=24, max_size=64, seed=0)

model = dict(
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=img_size, patch_size=8, with_cls_token=False, drop_path_rate=0.0),
    # A narrow decoder, so that the encoder does the work: with a decoder of width 64 (or 32)
    # the encoder's layers 1-3 go dead within 250 iterations (each adds one constant vector
    # to every token; tools/analysis/token_similarity.py) and the decoder alone reconstructs,
    # which leaves a detector nothing to start from (docs/pretraining.md, "Dead layers").
    neck=dict(embed_dims=16, num_layers=1, num_heads=2),
    # plain pixel targets, as the MAE authors' model for pictures: normalised ones lose each
    # hidden patch's colour, which tools/analysis/mae_reconstruction.py could then only guess
    head=dict(norm_pix=False))

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='RandomResizedCrop', size=img_size, scale=(0.2, 1.0), interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [dict(type='LoadImage'), dict(type='PackDetInputs')]

batch_size = 32
train_dataloader = dict(
    batch_size=batch_size, num_workers=1, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(type='UnlabelledImageDataset', data_root=data_root,
                 data_prefix=dict(img_path='train/'), pipeline=train_pipeline,
                 generate=dict(shapes, num_images=4000, seed=0)))
# validation: the reconstruction loss on the 200 val images, each masked the same way every time
val_dataloader = dict(
    batch_size=50, num_workers=1, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='UnlabelledImageDataset', data_root=data_root,
                 data_prefix=dict(img_path='val/'), test_mode=True, pipeline=test_pipeline,
                 generate=dict(shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader
val_evaluator = dict(type='PretrainLossMetric')
test_evaluator = val_evaluator

# the narrow decoder's objective stays on a plateau for about 1,000 iterations, then falls as
# the encoder takes over (docs/pretraining.md)
max_iters = 4000
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=500)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

# MAE's optimiser (AdamW, betas (0.9, 0.95), weight decay 0.05 except norms and biases) with a
# learning rate far above its 1.5e-4 x batch / 256: a few minutes, not 800 epochs
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.95), weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters, eta_min=0.0),
]

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False, interval=500, max_keep_ckpts=2))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
