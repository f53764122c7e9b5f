# Deformable DETR (Zhu et al. 2021), ResNet-50, COCO 2017: paper recipe, 50 epochs, batch 32
# (16 GPUs x 2). Paper AP 44.5 (+ box refinement 46.2). Strides 8/16/32 from ResNet
# (out_indices 1, 2, 3) + a stride-64 level made by a 3x3 stride-2 conv in the head.
#   python tools/train.py configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/deformable_detr.py',
          '../_base_/schedules/deformable_detr_50e.py', '../_base_/default_runtime.py']

pretrained = 'checkpoints/resnet50-0676ba61.pth'
model = dict(backbone=dict(
    type='ResNet', depth=50, out_indices=(1, 2, 3), frozen_stages=1,
    norm_cfg=dict(type='FrozenBN'), style='pytorch',
    init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
