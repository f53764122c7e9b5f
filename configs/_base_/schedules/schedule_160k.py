# 160k iterations, validation and a checkpoint every 16k. SGD with poly decay (power
# 0.9) is MMSegmentation's default; SETR and SegFormer configs override the optimizer.
max_iters = 160000
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=16000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0005),
    clip_grad=None)
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=0, end=max_iters, by_epoch=False)
]

# the recipes' total batch: 8 GPUs x 2 images; scale the lr linearly with --auto-scale-lr
auto_scale_lr = dict(base_batch_size=16, enable=False)
