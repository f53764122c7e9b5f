# Quickstart: DINO self-distillation (Caron et al. 2021, "Emerging Properties in Self-Supervised
# Vision Transformers") of the small ViT that the detection quickstarts use (width 128, 4 layers,
# 8x8 patches, learned 1D positions), with a class token added (the projection head reads it;
# a detector's ViT without one drops it and its position row on load: docs/pretraining.md), on
# the shapes images without their labels (data/shapes/, generated on first use, the same files
# as the detection quickstarts'). Not the detector configs/dino/ (DINO-DETR).
# 2 global crops of 128 px + 6 local ones of 56 px (DINO's 224 / 96, scaled to 128-px images),
# teacher = EMA of the student (momentum 0.996 -> 1, cosine), centering (0.9) and sharpening
# (teacher temperature 0.04 -> 0.07 over the first 30% of the run, student 0.1).
#   python tools/train.py configs/dino_ssl/dino_vit_shapes_quickstart.py
#   python tools/analysis/dino_attention.py configs/dino_ssl/dino_vit_shapes_quickstart.py \
#       work_dirs/dino_vit_shapes_quickstart/iter_2000.pth --num 6 --out dino_attention.png
# The data, validation metric, runtime and hooks are the MAE quickstart's (the same unlabelled
# images); the model, pipelines, schedule and optimiser are replaced.
_base_ = ['../mae/mae_vit_shapes_quickstart.py']

img_size = 128
max_iters = 2000
model = dict(
    _delete_=True,
    type='DINOSelfDistillation',
    data_preprocessor=dict(type='MultiCropDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True),
    # the detection quickstarts' ViT (configs/quickstart/detr_vit_shapes.py) with a class token
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=img_size, patch_size=8, with_cls_token=True, drop_path_rate=0.0),
    # DINO's head (3 layers, GELU, L2-normalised bottleneck of 256, weight-normalised last layer
    # with g fixed to 1) with 1,024 prototypes instead of 65,536: 4,000 images of 3 kinds of
    # shape on plain backgrounds have far fewer modes than ImageNet, a batch of 32 x 2 teacher
    # rows could not estimate the center of 65,536 outputs, and the last layer alone would
    # have 16.8M weights (the ViT: 0.8M)
    head=dict(type='DINOProjectionHead', out_channels=1024, hidden_channels=1024,
              bottleneck_channels=256, num_layers=3, norm_last_layer=True),
    num_global_crops=2,
    student_temp=0.1,
    teacher_temp=dict(start=0.04, end=0.07, warmup_steps=int(0.3 * max_iters)),
    center_momentum=0.9,
    momentum=dict(base=0.996, final=1.0, total_steps=max_iters))
custom_hooks = [dict(type='DINOTeacherUpdateHook'), dict(type='NonFiniteLossHook'),
                dict(type='ProgressBarHook')]

multi_crop = dict(
    type='DINOMultiCrop', global_size=img_size, local_size=56, num_global=2, num_local=6,
    # area fractions as DINO's; the blur's sigma (DINO: 0.1-2 px at 224) scaled by 128 / 224
    global_scale=(0.4, 1.0), local_scale=(0.05, 0.4), blur_sigma=(0.06, 1.14))
train_pipeline = [dict(type='LoadImage'), multi_crop, dict(type='PackMultiCropInputs')]
# validation: the same kind of crops, each image's drawn from its own seed (the same every time)
val_pipeline = [dict(type='LoadImage'), dict(multi_crop, seed=0),
                dict(type='PackMultiCropInputs')]

train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
# validation: the DINO loss (teacher temperature 0.07, the current center) on the fixed crops of
# the 200 val images: pretrain/objective (lower is better, but a collapsed model also scores low:
# read it beside teacher_entropy in the training log)
val_dataloader = dict(dataset=dict(pipeline=val_pipeline))
test_dataloader = val_dataloader

train_cfg = dict(max_iters=max_iters, val_interval=500)

# DINO's optimiser: AdamW, lr 5e-4 (its rate for a batch of 256; not scaled down to 32 here: a
# short run), linear warm-up then cosine decay to 1e-6, weight decay 0.04 -> 0.4 (cosine) except
# on norms and biases, gradients clipped at norm 3
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=5e-4, weight_decay=0.04),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0),
    clip_grad=dict(max_norm=3.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=100, end=max_iters, eta_min=1e-6),
    # ratio 10 of each group's own decay: 0.04 -> 0.4, and 0 stays 0 (norms, biases)
    dict(type='CosineAnnealingParamScheduler', param_name='weight_decay', by_epoch=False,
         begin=0, end=max_iters, eta_min_ratio=10.0),
]

