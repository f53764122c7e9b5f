# MMSegmentation's SegFormer and Swin ADE20K schedule: schedule_160k.py (160k iterations,
# validation and a checkpoint every 16k) with AdamW 6e-5 (betas 0.9 / 0.999, weight decay
# 0.01), 1500 iterations of linear warmup, then linear ("poly", power 1) decay to 0. A recipe
# adds its paramwise_cfg (which parameters get no weight decay, a higher lr).
_base_ = ['./schedule_160k.py']

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, by_epoch=False, begin=1500, end=160000),
]
