# COCO 2017 detection in the standard layout:
#   data/coco/annotations/instances_{train,val}2017.json, data/coco/{train,val}2017/*.jpg
# Augmentation is DETR's: flip; then either a multi-scale resize (shorter side 480..800,
# longer side <= 1333) or resize -> random crop 384..600 -> multi-scale resize.
dataset_type = 'CocoDataset'
data_root = 'data/coco/'

scales = [(1333, s) for s in range(480, 801, 32)]
train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=scales, keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(1333, 400), (1333, 500), (1333, 600)],
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
              allow_negative_crop=True),
         dict(type='RandomChoiceResize', scales=scales, keep_ratio=True)],
    ]),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImage'),
    # annotations are loaded before Resize so --show-dir draws ground truth correctly
    dict(type='LoadDetAnnotations'),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='PackDetInputs'),
]

train_dataloader = dict(
    batch_size=2, num_workers=2, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        type=dataset_type, data_root=data_root,
        ann_file='annotations/instances_train2017.json', data_prefix=dict(img='train2017/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=1), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=2, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type, data_root=data_root,
        ann_file='annotations/instances_val2017.json', data_prefix=dict(img='val2017/'),
        test_mode=True, pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(type='CocoMetric', ann_file=data_root + 'annotations/instances_val2017.json',
                     metric='bbox')
test_evaluator = val_evaluator
