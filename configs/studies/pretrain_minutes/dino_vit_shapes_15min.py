# DINO self-distillation with the MAE quickstart's minutes: the DINO quickstart
# (configs/dino_ssl/dino_vit_shapes_quickstart.py) cut to 300 iterations, about the 14 minutes
# of one thread that the MAE quickstart's 4,000 take (an iteration here runs 2 global + 6 local
# crops through student and teacher: about 13 MAE iterations). Every schedule is moved with it:
# warm-up 15 iterations (the quickstart's 5%), teacher temperature 0.04 -> 0.07 over the first
# 30% (90), EMA momentum 0.996 -> 1 and weight decay 0.04 -> 0.4 over the 300.
#   python tools/run_seeds.py configs/studies/pretrain_minutes/dino_vit_shapes_15min.py \
#       --name dino_vit_shapes_15min --seeds 0 --threads 1
# The study it serves: configs/studies/README.md (pretrain_minutes_seg, pretrain_minutes_det).
_base_ = ['../../dino_ssl/dino_vit_shapes_quickstart.py']

max_iters = 300
model = dict(
    teacher_temp=dict(start=0.04, end=0.07, warmup_steps=int(0.3 * max_iters)),
    momentum=dict(base=0.996, final=1.0, total_steps=max_iters))
train_cfg = dict(max_iters=max_iters, val_interval=150)
default_hooks = dict(checkpoint=dict(interval=150))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=15),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=15, end=max_iters, eta_min=1e-6),
    dict(type='CosineAnnealingParamScheduler', param_name='weight_decay', by_epoch=False,
         begin=0, end=max_iters, eta_min_ratio=10.0),
]
