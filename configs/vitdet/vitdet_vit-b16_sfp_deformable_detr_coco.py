# ViTDet's ViT-B/16 (MAE init) + simple feature pyramid + Deformable DETR, COCO; not measured.
#   python tools/train.py configs/vitdet/vitdet_vit-b16_sfp_deformable_detr_coco.py
#
# The backbone is ViTDet's ViT-B: no class token, windows of 14 x 14 patches in every block
# but 2, 5, 8 and 11 (global), decomposed relative positions (MViTv2) in every block, no norm
# after the last block, drop path 0.1, layer-wise lr decay 0.7; 1024 x 1024 large-scale-jitter
# crops (64 x 64 patches: each windowed block pads the grid to 70 x 70 and crops it back).
# ViTDet's simple feature pyramid makes strides 8, 16 and 32 from the stride-16 map, and the
# head a fourth level (stride 64): Deformable DETR's four levels (no stride-4 map: 65,536
# more encoder tokens at 1024). The rest is Deformable DETR's 50-epoch recipe (batch 32).
# Activation checkpointing (model.backbone.with_cp=True) trades compute for memory.
#
# Weights: the official MAE ViT-B/16 encoder, https://dl.fbaipublicfiles.com/mae/pretrain/
# mae_pretrain_vit_base.pth, saved as the path below (as configs/detr_vit_mae.py; MAE
# normalises with ImageNet statistics, as the base preprocessor). On load its class token and
# the table's class row are dropped, the table is kept at its 14 x 14 grid and resized to each
# input's grid at every forward (pos_grid, as ViTDet does), the decomposed tables start at
# zero (listed at INFO: not in MAE's file), and MAE's final norm is reported as unexpected
# (ViTDet reads the last block's output without it).
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/deformable_detr.py',
          '../_base_/schedules/deformable_detr_50e.py', '../_base_/default_runtime.py']

img_size = 1024
pretrained = 'checkpoints/mae_pretrain_vit_base.pth'
model = dict(
    data_preprocessor=dict(pad_size_divisor=32, patch_size=16),
    backbone=dict(
        type='VisionTransformer', arch='B', img_size=img_size, patch_size=16, pos_grid=(14, 14),
        with_cls_token=False, final_norm=False, out_indices=-1, drop_path_rate=0.1,
        window_size=14, global_attn_indexes=(2, 5, 8, 11), decomposed_rel_pos=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(type='SimpleFeaturePyramid', in_channels=768, out_channels=256,
              scale_factors=(2.0, 1.0, 0.5), in_stride=16))

# large-scale jitter (ViTDet's augmentation): resize to 0.1-2.0 x 1024, crop 1024 x 1024
train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomResize', scale=(img_size, img_size), ratio_range=(0.1, 2.0),
         keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute', crop_size=(img_size, img_size),
         allow_negative_crop=True),
    dict(type='PackDetInputs'),
]
# the base's test pipeline, the longer side resized to 1024
test_pipeline = [dict(step, scale=(img_size, img_size)) if step['type'] == 'Resize' else step
                 for step in _base_.test_pipeline]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# layer-wise lr decay (ViTDet's 0.7 for ViT-B: block i at lr x 0.7 ** (12 + 1 - i)) in place
# of the base's backbone x0.1; Deformable DETR's x0.1 on sampling offsets and reference points
optim_wrapper = dict(
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(_delete_=True, layer_decay_rate=0.7,
                       custom_keys={'sampling_offsets': dict(lr_mult=0.1),
                                    'reference_points': dict(lr_mult=0.1)}))
