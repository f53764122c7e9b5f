# DETR panoptic on the panoptic shapes, stage 2 of 2 (Carion et al. 2020, Sec. 4.4: "we freeze
# all the weights and train only the mask head"): stage 1's detector
# (detr_vit_shapes_panoptic_boxes.py, loaded from its checkpoint and frozen) with DETR's mask
# head (DETRMaskHead: each query's attention maps over the encoder memory, stacked on the
# projected map and convolved) trained alone with the focal and dice losses. The plain ViT has
# one stride-8 map and no finer one, so the mask head has no FPN stage (fpn_indices=()): masks
# at stride 8 (16x16 for the 128-pixel images), resized bilinearly (docs/detr_family.md).
# The focal-loss classifier's scores rarely reach DETR's 0.85, so queries above 0.4 are kept.
# Evaluated together: PQ (panoptic), mask AP and box AP of the things.
#   python tools/train.py configs/detr_panoptic/detr_vit_shapes_panoptic_boxes.py
#   python tools/train.py configs/detr_panoptic/detr_vit_shapes_panoptic.py
#   python tools/test.py configs/detr_panoptic/detr_vit_shapes_panoptic.py \
#       work_dirs/detr_vit_shapes_panoptic/iter_800.pth --show-dir vis
# Without a first-stage checkpoint at load_from the training stops before it starts.
_base_ = ['./detr_vit_shapes_panoptic_boxes.py']

load_from = 'work_dirs/detr_vit_shapes_panoptic_boxes/iter_1600.pth'
model = dict(
    mask_head=dict(type='DETRMaskHead', num_heads=8), fpn_indices=(), freeze_detector=True,
    test_cfg=dict(rule='detr', object_threshold=0.4, min_area=5))

data_root = 'data/shapes_panoptic/'
val_evaluator = [
    dict(type='CocoPanopticMetric', ann_file=data_root + 'annotations/panoptic_val.json',
         seg_prefix=data_root + 'annotations/panoptic_val/'),
    dict(type='CocoMetric', metric=['bbox', 'segm'],
         ann_file=data_root + 'annotations/instances_val.json'),
]
test_evaluator = val_evaluator

# the mask head alone: 800 iterations, the learning rate divided by 10 for the last 200
max_iters = 800
train_cfg = dict(max_iters=max_iters, val_interval=200)
param_scheduler = _base_.param_scheduler  # the quickstart's warm-up and step
param_scheduler[1].update(end=max_iters, milestones=[600])
