# DINO on the shapes (configs/dino/dino_vit_shapes.py: AdamW 8e-4, 100 + 100 queries, class
# weight 2) with a cosine learning-rate decay in place of the quickstart's step: the same
# 100-iteration linear warm-up, then cosine from 8e-4 down to 8e-6 at iteration 800 (the
# step schedule holds 8e-4 until 700, then 8e-5). At 8e-4 with the step, seed 1 was at
# AP 0.333 at iteration 500 against the 0.41; it was still learning at the full rate.
# Seeds 0-2, one thread, three runs at once: AP 0.482 / 0.405 / 0.416 at 500 (worst seed 1,
# 0.005 under 0.41), 0.623 / 0.513 / 0.581 at 800 (the step: 0.620-0.698), so the quickstart
# keeps the step (docs/detr_family.md, "A cosine decay").
#   python tools/run_seeds.py configs/studies/dino_recipe/dino_cosine.py --name cosine \
#       --seeds 0 1 2 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe \
#       --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../dino/dino_vit_shapes.py']

param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=100, end=800, T_max=700,
         eta_min_ratio=0.01),
]
# the rate it was measured at (the quickstart's own, pinned against a later change there)
optim_wrapper = dict(optimizer=dict(lr=8e-4))
