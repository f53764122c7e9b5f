# DETR's recipe: AdamW 1e-4 (backbone 1e-5), weight decay 1e-4, gradient clip 0.1,
# 300 epochs with the learning rate divided by 10 after 200.
max_epochs = 300
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=10)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    clip_grad=dict(max_norm=0.1, norm_type=2),
    paramwise_cfg=dict(custom_keys={'backbone': dict(lr_mult=0.1)}))

param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[200], gamma=0.1)
]

# the recipe's total batch: 8 GPUs x 2 images; scale the lr linearly with --auto-scale-lr
auto_scale_lr = dict(base_batch_size=16, enable=False)
