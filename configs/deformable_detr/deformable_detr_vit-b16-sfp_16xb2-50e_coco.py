# Deformable DETR on a plain ViT-B/16 with ViTDet's simple feature pyramid (strides 8, 16,
# 32 from the stride-16 map by 2x deconv / identity / max-pool; + one extra level in the
# head), COCO 2017, the paper's 50-epoch recipe, batch 32 (16 GPUs x 2).
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/deformable_detr.py',
          '../_base_/schedules/deformable_detr_50e.py', '../_base_/default_runtime.py']

pretrained = 'checkpoints/vit-base-p16_224.pth'
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone=dict(
        type='VisionTransformer', arch='B', img_size=224, patch_size=16, with_cls_token=True,
        drop_path_rate=0.1, out_indices=-1, final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(type='SimpleFeaturePyramid', in_channels=768, out_channels=256,
              scale_factors=(2.0, 1.0, 0.5), in_stride=16))
