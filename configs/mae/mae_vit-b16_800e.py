# MAE pre-training of ViT-B/16 as in He et al. 2022 (Table 1 / App. A.1): 75% of the 14x14
# patches masked, an 8-layer decoder of width 512 (16 heads), normalised-pixel targets, fixed
# 2D sine-cosine position embeddings in encoder and decoder, a class token; AdamW, lr 1.5e-4 x
# batch / 256, betas (0.9, 0.95), weight decay 0.05 (not on norms and biases), batch 4096,
# cosine decay after 40 warm-up epochs, 800 epochs (mae_vit-b16_1600e.py: 1600); augmentation
# RandomResizedCrop(224, scale 0.2-1, bicubic) and a horizontal flip only.
# Data: any folder of images (ImageNet-1K's train/ in the paper; labels and class folders
# are not read). 64 processes x 64 images make the paper's batch; on fewer, --auto-scale-lr
# scales the learning rate to the batch actually used.
#   tools/dist_train.sh configs/mae/mae_vit-b16_800e.py 8 --auto-scale-lr
# A downstream ViT loads the encoder from backbone.*; give it the same pos_embed ('sincos_2d':
# a fixed table, not stored in the checkpoint).
_base_ = ['../_base_/models/mae.py', '../_base_/default_runtime.py']

data_root = 'data/imagenet/'
img_size = 224

# xavier_init: MAE's encoder initialisation (Xavier-uniform Linear layers and patch projection)
model = dict(xavier_init=True,
             backbone=dict(type='VisionTransformer', arch='B', img_size=img_size, patch_size=16,
                           with_cls_token=True, pos_embed=dict(type='sincos_2d'),
                           drop_path_rate=0.0))

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='RandomResizedCrop', size=img_size, scale=(0.2, 1.0), interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]

batch_size = 4096  # total over all processes
per_process = 64
train_dataloader = dict(
    batch_size=per_process, num_workers=8, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='UnlabelledImageDataset', data_root=data_root,
                 data_prefix=dict(img_path='train/'), pipeline=train_pipeline))

max_epochs = 800
warmup_epochs = 40
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs)  # no validation

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1.5e-4 * batch_size / 256, betas=(0.9, 0.95),
                   weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=warmup_epochs, end=max_epochs,
         T_max=max_epochs - warmup_epochs, eta_min=0.0, convert_to_iter_based=True),
]
auto_scale_lr = dict(base_batch_size=batch_size, enable=False)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=100),
    checkpoint=dict(type='AtomicCheckpointHook', interval=20, max_keep_ckpts=3))
randomness = dict(seed=0, diff_rank_seed=True)  # each process its own masks
