# The MAE quickstart (mae_vit_shapes_quickstart.py) on a 2.5x longer schedule: 10,000
# iterations, the cosine decay stretched to match (53 minutes on one thread here). Its
# encoder starts Deformable DETR closer to a supervised backbone (docs/pretraining.md).
#   python tools/train.py configs/mae/mae_vit_shapes_10k.py
# then fine-tune from work_dirs/mae_vit_shapes_10k/iter_10000.pth (configs/mae/finetune/).
_base_ = ['./mae_vit_shapes_quickstart.py']

max_iters = 10000
train_cfg = dict(max_iters=max_iters, val_interval=1000)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters, eta_min=0.0),
]
default_hooks = dict(checkpoint=dict(interval=1000))
