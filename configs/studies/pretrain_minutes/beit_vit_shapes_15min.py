# BEiT masked image modelling with the MAE quickstart's minutes: the BEiT quickstart
# (configs/beit_ssl/beit_vit_shapes_quickstart.py) with its visual tokens made from the MAE
# quickstart's encoder (seed 0, 4,000 iterations: the MAE row of the study) and its schedule cut
# to 700 iterations: about the MAE quickstart's 14 minutes of one thread (an iteration here took
# 1.18 s beside another one-thread training, the MAE's 0.2 s: the whole 16x16 grid goes through
# the encoder, and the teacher runs too). The tokens stand on the MAE's minutes: BEiT's total is
# the MAE's, the k-means' (half a minute) and its own.
#   python tools/run_seeds.py configs/mae/mae_vit_shapes_quickstart.py \
#       --name mae_vit_shapes_quickstart --seeds 0 --threads 1
#   mkdir -p work_dirs/beit_tokenizer_shapes
#   python tools/pretrain/make_tokenizer.py configs/mae/mae_vit_shapes_quickstart.py \
#       work_dirs/seeds/mae_vit_shapes_quickstart/seed0/iter_4000.pth --k 512 \
#       --out work_dirs/beit_tokenizer_shapes/mae4k_k512.pth
#   python tools/run_seeds.py configs/studies/pretrain_minutes/beit_vit_shapes_15min.py \
#       --name beit_vit_shapes_15min --seeds 0 --threads 1
_base_ = ['../../beit_ssl/beit_vit_shapes_quickstart.py']

max_iters = 700
model = dict(tokenizer=dict(checkpoint='work_dirs/beit_tokenizer_shapes/mae4k_k512.pth'))
train_cfg = dict(max_iters=max_iters, val_interval=350)
default_hooks = dict(checkpoint=dict(interval=350))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters, eta_min=0.0),
]
