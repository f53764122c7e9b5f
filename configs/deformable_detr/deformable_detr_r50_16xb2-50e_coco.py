# Deformable DETR (Zhu et al. 2021), ResNet-50, COCO 2017: paper recipe, 50 epochs, batch 32
# (16 GPUs x 2). Paper AP 44.5 (+ box refinement 46.2). Strides 8/16/32 from ResNet
# (out_indices 1, 2, 3) + a stride-64 level made by a 3x3 stride-2 conv in the head.
# Mirrors MMDetection 3.x's deformable-detr_r50_16xb2-50e_coco.py (same architecture, test
# pipeline, top-100 detections), so its zoo checkpoint evaluates unchanged:
#   python tools/test.py configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py \
#       deformable-detr_r50_16xb2-50e_coco_20221029_210934-6bc7d21b.pth
# (mmdet's ChannelMapper neck is this head's input_proj; the conversion is in
# densevit/checkpoint/deformable_detr.py). Train:
#   python tools/train.py configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/deformable_detr.py',
          '../_base_/schedules/deformable_detr_50e.py', '../_base_/default_runtime.py']

pretrained = 'checkpoints/resnet50-0676ba61.pth'  # torchvision://resnet50, as mmdet
# FrozenBN is mmdet's BN(requires_grad=False) with norm_eval=True
model = dict(backbone=dict(
    type='ResNet', depth=50, out_indices=(1, 2, 3), frozen_stages=1,
    norm_cfg=dict(type='FrozenBN'), style='pytorch',
    init_cfg=dict(type='Pretrained', checkpoint=pretrained)))

# The paper's (and mmdet's) crop branch resizes the shorter side to 400/500/600 with no
# practical bound on the longer one (4200), unlike DETR's 1333; images without boxes are kept.
scales = [(1333, s) for s in range(480, 801, 32)]
train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=scales, keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(4200, 400), (4200, 500), (4200, 600)],
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
              allow_negative_crop=True),
         dict(type='RandomChoiceResize', scales=scales, keep_ratio=True)],
    ]),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(filter_cfg=dict(filter_empty_gt=False),
                                     pipeline=train_pipeline))
