# DETR on a plain ViT-B/16, COCO 2017: the headline. One single-scale map (stride 16), no
# transformer encoder, no deformable attention, global cross-attention with BoxRPB --
# Plain-DETR (Lin et al. 2023) with its convergence options on: two-stage proposals, mixed
# query selection, box refinement with look-forward-twice, a one-to-many branch of 1,500
# queries with the ground truth repeated 6 times (H-DETR). 12 epochs, batch 16 (8 GPUs x 2).
#   python tools/train.py configs/detr_vit.py
#
# Weights: timm's ViT-B/16 AugReg (ImageNet-21k, fine-tuned on ImageNet-1k at 224),
# https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k -> model.safetensors,
# saved as the path below. It was trained on images normalised with mean = std = 0.5 (its
# pretrained_cfg), so this config normalises with 127.5 / 127.5, not ImageNet statistics.
# From MAE instead: configs/detr_vit_mae.py.
#
# COCO box AP: expected, not measured here (no COCO or GPU in this project's CI). Nearest
# published: Plain-DETR, Swin-V2-S, 12 epochs: 46.1 with BoxRPB (37.2 without), 48.7 after
# MIM pre-training; DINO on a ViTDet-B backbone (MAE ViT-B, multi-scale), 12 epochs: 50.2.
_base_ = [
    '_base_/datasets/coco_detection.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/vit_base_patch16_224.augreg2_in21k_ft_in1k.safetensors'
embed_dims = 256
model = dict(
    type='DETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5],
        bgr_to_rgb=True, pad_size_divisor=16, patch_size=16),
    backbone=dict(
        type='VisionTransformer', arch='B', img_size=224, patch_size=16, with_cls_token=True,
        drop_path_rate=0.1, out_indices=-1, final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        type='PlainDETRHead', num_classes=80, embed_dims=embed_dims, num_queries=300,
        num_heads=8, num_encoder_layers=0, num_decoder_layers=6, feedforward_channels=2048,
        dropout=0.0, box_rpb=dict(hidden_dims=512, stride=16, mode='log8'),
        as_two_stage=True, mixed_selection=True, look_forward_twice=True,
        one_to_many=dict(num_queries=1500, k=6, loss_weight=1.0), num_dets=100,
        criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                       matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                    cost_bbox=5.0, cost_giou=2.0),
                       loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))))

# 12 epochs, the learning rate / 10 for the last one (Plain-DETR's 1x schedule); AdamW 2e-4,
# weight decay 0.05, gradient clip 0.1. The ViT's blocks decay layer by layer (ViTDet's 0.7
# for ViT-B: block i at lr x 0.7 ** (12 + 1 - i)); no weight decay on the position table,
# class token, norms and biases (the constructor's defaults).
max_epochs = 12
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=1)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper', constructor='LayerDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-4, weight_decay=0.05),
    clip_grad=dict(max_norm=0.1, norm_type=2),
    paramwise_cfg=dict(layer_decay_rate=0.7))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[11],
         gamma=0.1),
]
auto_scale_lr = dict(base_batch_size=16, enable=False)
