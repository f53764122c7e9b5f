# DINO shapes quickstart (configs/dino/dino_vit_shapes.py) with the Deformable DETR
# quickstart's classification loss weight 2 (DINO's is 1): is that why DINO lags Deformable
# DETR after iteration 400? Seeds 0-2: AP 0.372-0.414 at 800 iterations, against 0.298-0.344
# with weight 1 (docs/detr_family.md, "DINO").
#   python tools/run_seeds.py configs/studies/dino_recipe/dino_vit_shapes_cls2.py --name cls2 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --seeds 0 1 2 --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../dino/dino_vit_shapes.py']

model = dict(bbox_head=dict(criterion=dict(
    type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
    matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0, cost_bbox=5.0,
                 cost_giou=2.0),
    loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))
