# Co-DINO shapes quickstart (configs/co_detr/co_dino_vit_shapes.py) with the Deformable DETR
# quickstart's classification loss weight 2 (Co-DINO's is 1), as
# dino_vit_shapes_cls2.py does for DINO (docs/detr_family.md, "DINO"). Seeds 0-2: bbox AP
# 0.476-0.486 at 800 iterations (worst seed 0), AP50 0.636-0.660.
#   python tools/run_seeds.py configs/studies/dino_recipe/co_dino_vit_shapes_cls2.py --name co_dino_cls2 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --seeds 0 1 2 --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../co_detr/co_dino_vit_shapes.py']

model = dict(bbox_head=dict(criterion=dict(
    type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0, quality_focal=True,
    matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0, cost_bbox=5.0,
                 cost_giou=2.0),
    loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))
