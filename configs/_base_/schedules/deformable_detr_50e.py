# Deformable DETR's recipe (Zhu et al. 2021): AdamW 2e-4, weight decay 1e-4, gradient clip 0.1;
# backbone, sampling offsets and reference points at lr x0.1; 50 epochs, lr / 10 after 40;
# total batch 32 (e.g. 8 GPUs x 4 or 16 x 2).
max_epochs = 50
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=5)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, weight_decay=1e-4),
    clip_grad=dict(max_norm=0.1, norm_type=2),
    paramwise_cfg=dict(custom_keys={'backbone': dict(lr_mult=0.1),
                                    'sampling_offsets': dict(lr_mult=0.1),
                                    'reference_points': dict(lr_mult=0.1)}))
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[40], gamma=0.1)
]
auto_scale_lr = dict(base_batch_size=32, enable=False)
