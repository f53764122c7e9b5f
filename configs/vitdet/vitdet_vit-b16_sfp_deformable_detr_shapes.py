# ViTDet's windowed ViT-B/16 + simple feature pyramid + Deformable DETR on the shapes data,
# from scratch: the COCO recipe's model (vitdet_vit-b16_sfp_deformable_detr_coco.py) at a size
# that runs in seconds on a GPU, for checking that path (windows padded 32 -> 42, decomposed
# relative positions, activation checkpointing, AMP) end to end on CUDA. Not tuned; no
# number measured here (a ViT-B from scratch on 4,000 images does not learn in 40 iterations).
#   python tools/train.py configs/vitdet/vitdet_vit-b16_sfp_deformable_detr_shapes.py
#   ... --cfg-options model.backbone.with_cp=True   (activation checkpointing of every block)
#
# The 128 x 128 shapes images are resized to 512 x 512 (a 32 x 32 patch grid: each windowed
# block pads it to 3 x 3 windows of 14 x 14 and crops it back); the pyramid makes strides 8,
# 16 and 32 from the stride-16 map and the head a fourth level (stride 64), as in the COCO
# config. Batch 4.
_base_ = ['../quickstart/deformable_detr_vit_shapes.py']

img_size = 512
model = dict(
    data_preprocessor=dict(pad_size_divisor=32, patch_size=16),
    backbone=dict(
        _delete_=True, type='VisionTransformer', arch='B', img_size=img_size, patch_size=16,
        with_cls_token=False, final_norm=False, out_indices=-1, drop_path_rate=0.1,
        window_size=14, global_attn_indexes=(2, 5, 8, 11), decomposed_rel_pos=True),
    neck=dict(in_channels=768, scale_factors=(2.0, 1.0, 0.5), in_stride=16),
    bbox_head=dict(num_feature_levels=4))

resize = dict(type='Resize', scale=(img_size, img_size), keep_ratio=True)
train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    resize,
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [dict(resize) if step['type'] == 'Resize' else step
                 for step in _base_.test_pipeline]
train_dataloader = dict(batch_size=4, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=4, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
