# ADE20K (SceneParsing 2016) in the challenge layout:
#   data/ade/ADEChallengeData2016/images/{training,validation}/*.jpg
#   data/ade/ADEChallengeData2016/annotations/{training,validation}/*.png
# Train: random rescale of (2048, 512) by 0.5-2.0, random 512x512 crop in which no
# class holds 75% or more of the labelled pixels, flip, photometric distortion (the
# data preprocessor pads to 512x512: image 0, label 255).
# Test: resize to fit (2048, 512); labels are loaded after the resize, at the
# original size, where predictions are resized back to and the metric compares.
dataset_type = 'ADE20KDataset'
data_root = 'data/ade/ADEChallengeData2016/'
crop_size = (512, 512)

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadSegAnnotations'),
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImage'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='LoadSegAnnotations'),
    dict(type='PackSegInputs'),
]

train_dataloader = dict(
    batch_size=2, num_workers=4, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type, data_root=data_root,
        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=4, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type, data_root=data_root,
        data_prefix=dict(img_path='images/validation', seg_map_path='annotations/validation'),
        test_mode=True, pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
