# UperNet on a DINOv2 ViT-B/14 (Oquab et al. 2024) on ADE20K: the pre-trained ViT's last map
# through a ViTDet simple feature pyramid (strides 3.5, 7, 14, 28) into UperNet's four
# levels, with its FCN auxiliary head; 518x518 crops (37 x 37 patches, the checkpoint's own
# position table), 160k iterations of AdamW with layer-wise lr decay. No published UperNet
# number on DINOv2-B was verified here (the paper reports linear probes): nothing expected is
# claimed, nothing measured here.
# Weights: Hugging Face facebook/dinov2-base as save_pretrained writes it (the folder or its
# model.safetensors; converted on load, densevit/checkpoint/dinov2.py). DINOv2 normalises with
# ImageNet's mean / std, as the base preprocessor.
#   python tools/train.py configs/dinov2/dinov2_vit-b14_upernet_518x518_ade20k.py
_base_ = [
    '../_base_/models/upernet_swin.py',  # its heads and preprocessor; the backbone replaced
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/adamw_160k.py',
]

crop_size = (518, 518)
data_preprocessor = _base_.model.data_preprocessor
pretrained = 'checkpoints/dinov2-base/model.safetensors'
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        _delete_=True, type='VisionTransformer', arch='B', img_size=518, patch_size=14,
        with_cls_token=True, layer_scale_init_value=1.0, out_indices=(11,), final_norm=True,
        interpolate_mode='bicubic', drop_path_rate=0.1,
        # whole-image / border windows of sides that are not multiples of 14: padded
        pad_to_patch=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(type='SimpleFeaturePyramid', in_channels=768, out_channels=256,
              scale_factors=(4.0, 2.0, 1.0, 0.5), in_stride=14),
    decode_head=dict(in_channels=[256, 256, 256, 256], num_classes=150),
    auxiliary_head=dict(in_channels=256, num_classes=150),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(341, 341)))

train_pipeline = [
    dict(type='LoadImage'),
    dict(type='LoadSegAnnotations'),
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))

# AdamW 6e-5 (adamw_160k.py) with ViT block i at lr x 0.9 ** (12 + 1 - i); no weight decay on
# the position table, class token, norms, biases and LayerScale gammas (the constructor's
# defaults).
optim_wrapper = dict(constructor='LayerDecayOptimWrapperConstructor',
                     paramwise_cfg=dict(layer_decay_rate=0.9))
