# DETR (Carion et al. 2020) on a ViT-B/16 backbone, COCO 2017, DETR's 300-epoch recipe
# (8 GPUs x 2 images). Train: python tools/train.py configs/detr_vit.py
# The backbone starts from ImageNet ViT-B/16 weights (timm layout) at the path below.
_base_ = [
    '_base_/datasets/coco_detection.py',
    '_base_/schedules/detr_300e.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/vit-base-p16_224.pth'
model = dict(
    type='DETR',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=16),
    backbone=dict(
        type='VisionTransformer', arch='B', img_size=224, patch_size=16, with_cls_token=True,
        drop_path_rate=0.1, out_indices=-1, final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        type='DETRHead', num_classes=80, embed_dims=256, num_queries=100,
        transformer=dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                         feedforward_channels=2048, dropout=0.1),
        positional_encoding=dict(num_feats=128, temperature=10000, normalize=True),
        criterion=dict(type='SetCriterion',
                       matcher=dict(type='HungarianMatcher', cost_class=1.0, cost_bbox=5.0,
                                    cost_giou=2.0),
                       loss_weights=dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0),
                       no_object_weight=0.1),
        aux_loss=True))
