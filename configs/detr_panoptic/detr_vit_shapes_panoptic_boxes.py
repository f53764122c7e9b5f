# DETR panoptic on the panoptic shapes, stage 1 of 2 (Carion et al. 2020, Sec. 4.4: "we
# train DETR to predict boxes around both stuff and things classes"): the DETR-on-ViT
# quickstart's model (configs/quickstart/detr_vit_shapes.py: the small ViT/8, a one-level
# simple feature pyramid, PlainDETRHead with BoxRPB, two-stage queries, one-to-many branch)
# and schedule (1,600 iterations, batch 16), as DETRPanoptic on the segments of
# data/shapes_panoptic (configs/_base_/datasets/shapes_panoptic.py): 6 classes, things circle
# / rectangle / triangle, stuff noise / stripes / gradient, each segment a box around its
# mask. The quickstart's own checkpoint cannot be this stage: it was trained on data/shapes
# for the 3 thing classes only, and DETR's panoptic queries must also find the stuff.
# Its encoder, decoder and ViT can start it:
#   python tools/train.py configs/detr_panoptic/detr_vit_shapes_panoptic_boxes.py \
#       [--cfg-options load_from=work_dirs/detr_vit_shapes/iter_1600.pth]
# (the quickstart's checkpoint, where `python tools/train.py configs/quickstart/
# detr_vit_shapes.py` writes it; its 3-class predictors do not fit 6 and stay new).
# Writes work_dirs/detr_vit_shapes_panoptic_boxes/iter_1600.pth, which stage 2
# (detr_vit_shapes_panoptic.py) loads. Evaluated: box AP of the things.
_base_ = ['../quickstart/detr_vit_shapes.py']

data_root = 'data/shapes_panoptic/'
img_size = 128
shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=24, max_size=64)
model = dict(type='DETRPanoptic', num_things_classes=3, bbox_head=dict(num_classes=6))

# the quickstart's pipelines with the panoptic annotations (moved by the flip / resize)
train_pipeline = _base_.train_pipeline
train_pipeline[1] = dict(type='LoadPanopticAnnotations')
test_pipeline = _base_.test_pipeline
test_pipeline[1] = dict(type='LoadPanopticAnnotations')
panoptic = dict(_delete_=True, type='ShapesPanopticDataset', data_root=data_root)
train_dataloader = dict(dataset=dict(
    panoptic, ann_file='annotations/panoptic_train.json',
    data_prefix=dict(img='train/', seg='annotations/panoptic_train/'),
    filter_cfg=dict(filter_empty_gt=True), pipeline=train_pipeline,
    generate=dict(shapes, num_images=2000, seed=0)))
val_dataloader = dict(dataset=dict(
    panoptic, ann_file='annotations/panoptic_val.json',
    data_prefix=dict(img='val/', seg='annotations/panoptic_val/'), test_mode=True,
    pipeline=test_pipeline, generate=dict(shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader
val_evaluator = dict(type='CocoMetric', ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
