# DINO (Zhang et al. 2023), 4 scales, ResNet-50, COCO 2017, 12 epochs, batch 16 (8 GPUs x 2).
# Deformable DETR (two-stage, box refinement) with mixed query selection, look forward twice
# and contrastive denoising: densevit's DINOHead (densevit/models/heads/dino_head.py).
# Mirrors MMDetection 3.x's dino-4scale_r50_8xb2-12e_coco.py (its recipe values: 900
# queries, FFN 2048, no dropout, image encoding temperature 20 without offset, focal loss
# weight 1 / L1 5 / GIoU 2, 100 DN queries, top-300 detections, AdamW 1e-4 with the backbone
# at x0.1, clip 0.1, lr / 10 after epoch 11), so its zoo checkpoint evaluates unchanged:
#   python tools/test.py configs/dino/dino-4scale_r50_8xb2-12e_coco.py \
#       dino-4scale_r50_8xb2-12e_coco_20221202_182705-55b2bba2.pth
# (the conversion: densevit/checkpoint/deformable_detr.py, 'MMDetection DINO'). Train:
#   python tools/train.py configs/dino/dino-4scale_r50_8xb2-12e_coco.py
_base_ = ['../deformable_detr/deformable_detr_r50_16xb2-50e_coco.py']

model = dict(bbox_head=dict(
    _delete_=True, type='DINOHead', num_classes=80, embed_dims=256, num_queries=900,
    num_feature_levels=4, num_dets=300,
    transformer=dict(num_heads=8, num_points=4, num_encoder_layers=6, num_decoder_layers=6,
                     feedforward_channels=2048, dropout=0.0),
    positional_encoding=dict(temperature=20, offset=0.0),
    criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                   matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                cost_bbox=5.0, cost_giou=2.0),
                   loss_weights=dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0)),
    dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=100)))

max_epochs = 12
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=1)
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    clip_grad=dict(max_norm=0.1, norm_type=2),
    paramwise_cfg=dict(_delete_=True, custom_keys={'backbone': dict(lr_mult=0.1)}))
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[11], gamma=0.1)
]
auto_scale_lr = dict(base_batch_size=16, enable=False)
