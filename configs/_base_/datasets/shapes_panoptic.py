# Procedural shapes as COCO panoptic segmentation, generated under data/shapes_panoptic/ on
# first use (docs/datasets.md): things circle, rectangle, triangle (labels 0-2) on two or three
# textured background bands, the stuff noise, stripes, gradient (labels 3-5); 128x128 images,
# up to 4 shapes of 24-64 px; 2,000 training images (seed 0), 200 validation images (seed 1).
# Samples carry gt_instances (boxes, labels, masks), gt_sem_seg and gt_panoptic_seg.
dataset_type = 'ShapesPanopticDataset'
data_root = 'data/shapes_panoptic/'
img_size = 128
shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=24, max_size=64)

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadPanopticAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
# other images are resized to the training size; the annotations are loaded after the
# resize, at the original size, which predictions are compared at
test_pipeline = [
    dict(type='LoadImage'),
    dict(type='Resize', scale=(img_size, img_size), keep_ratio=True),
    dict(type='LoadPanopticAnnotations'),
    dict(type='PackDetInputs'),
]

train_dataloader = dict(
    batch_size=8, num_workers=2, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        type=dataset_type, data_root=data_root, ann_file='annotations/panoptic_train.json',
        data_prefix=dict(img='train/', seg='annotations/panoptic_train/'),
        filter_cfg=dict(filter_empty_gt=True), pipeline=train_pipeline,
        generate=dict(shapes, num_images=2000, seed=0)))
val_dataloader = dict(
    batch_size=8, num_workers=2, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type, data_root=data_root, ann_file='annotations/panoptic_val.json',
        data_prefix=dict(img='val/', seg='annotations/panoptic_val/'),
        test_mode=True, pipeline=test_pipeline, generate=dict(shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader
