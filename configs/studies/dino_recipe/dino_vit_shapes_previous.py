# The DINO shapes quickstart as it was before the recipe of configs/dino/dino_vit_shapes.py:
# 30 matching queries, 20 denoising queries, AdamW 2e-4 (the Deformable DETR quickstart's
# rate). The base of the studies here that ran on it; its seeds 0-2: bbox AP 0.372-0.414 at
# 800 iterations (worst seed 2), 0.235-0.259 at 500. At 4e-4 (--cfg-options
# optim_wrapper.optimizer.lr=4e-4, --name previous_lr4e-4), seeds 0-2: 0.491-0.572 (worst seed 2),
# 0.317-0.345 at 500 (docs/detr_family.md, "DINO").
#   python tools/run_seeds.py configs/studies/dino_recipe/dino_vit_shapes_previous.py --name cls2 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../dino/dino_vit_shapes.py']

model = dict(bbox_head=dict(num_queries=30, dn_cfg=dict(num_dn_queries=20)))
optim_wrapper = dict(optimizer=dict(lr=2e-4))
