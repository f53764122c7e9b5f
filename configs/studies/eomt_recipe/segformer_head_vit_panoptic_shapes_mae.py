# The per-pixel reference for EoMT's semantic output on the same data: the ViT + simple feature
# pyramid + SegFormer head of configs/mae/finetune/segformer_head_vit_shapes_mae.py (the ViT
# from the 10,000-iteration MAE, layer decay 0.75), trained on the class maps of the panoptic
# shapes (EoMT's data: 128x128, 3 thing + 3 stuff classes) for EoMT's 3,000 iterations, batch 8,
# mIoU on the same 200 validation images. Issue 30 item 5 quotes the SegFormer head's mIoU on
# the segmentation quickstart's 96-pixel, 4-class shapes: another dataset. This measures it here
# (seeds 0-2: mIoU 70.4 / 72.0 / 71.4; EoMT 53.5-55.7; docs/eomt.md):
#   python tools/run_seeds.py configs/studies/eomt_recipe/segformer_head_vit_panoptic_shapes_mae.py \
#       --name segformer_head_vit_panoptic_shapes-mae10k --threads 1 \
#       --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/seeds/mae_vit_shapes_10k/seed0/iter_10000.pth
_base_ = ['../../mae/finetune/segformer_head_vit_shapes_mae.py']

img_size = 128
model = dict(backbone=dict(img_size=img_size), decode_head=dict(num_classes=6))

# the panoptic shapes (configs/_base_/datasets/shapes_panoptic.py), their class maps alone
_panoptic = dict(type='ShapesPanopticDataset', data_root='data/shapes_panoptic/')
_shapes = dict(img_size=(img_size, img_size), max_objects=4, min_size=24, max_size=64)
train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadPanopticAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImage'),
    dict(type='Resize', scale=(img_size, img_size), keep_ratio=True),
    dict(type='LoadPanopticAnnotations'),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(
    _delete_=True, **_panoptic, ann_file='annotations/panoptic_train.json',
    data_prefix=dict(img='train/', seg='annotations/panoptic_train/'),
    filter_cfg=dict(filter_empty_gt=True), pipeline=train_pipeline,
    generate=dict(_shapes, num_images=2000, seed=0)))
val_dataloader = dict(dataset=dict(
    _delete_=True, **_panoptic, ann_file='annotations/panoptic_val.json',
    data_prefix=dict(img='val/', seg='annotations/panoptic_val/'), test_mode=True,
    pipeline=test_pipeline, generate=dict(_shapes, num_images=200, seed=1)))
test_dataloader = val_dataloader

max_iters = 3000  # EoMT's
train_cfg = dict(max_iters=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=100, end=max_iters),
]
