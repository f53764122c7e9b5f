# Co-DINO shapes quickstart (configs/co_detr/co_dino_vit_shapes.py) with Co-DINO's own
# classification loss weight 1 instead of the quickstart's 2. Seeds 0-1: bbox AP 0.419-0.421 at
# 800 iterations, against 0.476-0.486 (seeds 0-2) with weight 2 (docs/detr_family.md, "DINO").
# Those seeds ran as `configs/co_detr/co_dino_vit_shapes.py` while weight 1 was its default
# (commit 88dab31 and before); this config builds the same model.
#   python tools/run_seeds.py configs/studies/dino_recipe/co_dino_vit_shapes_cls1.py --name co_dino_vit_shapes_1thread --threads 1 --seeds 0 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../co_detr/co_dino_vit_shapes.py']

model = dict(bbox_head=dict(criterion=dict(loss_weights=dict(loss_cls=1.0))))
