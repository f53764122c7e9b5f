# Quickstart-size DINO on the shapes: the Deformable DETR quickstart
# (configs/quickstart/deformable_detr_vit_shapes.py: the small ViT, the simple feature pyramid,
# 3 levels, its schedule and data) with DINO's head: two-stage with mixed query selection,
# look forward twice, contrastive denoising (20 DN queries), top-100 detections. Queries are
# few (30) as the quickstart's. One change from DINO's recipe, as the Deformable quickstart:
# the focal classification loss is weighted 2 (DINO's: 1). Measured at 800 iterations, seeds
# 0-2, one thread: bbox AP 0.372-0.414 (worst seed 2) with weight 2, against 0.298-0.344 with
# DINO's weight 1 (configs/studies/dino_recipe/dino_vit_shapes_cls1.py); the Deformable DETR
# quickstart has 0.392-0.413 (docs/detr_family.md, "DINO").
#   python tools/train.py configs/dino/dino_vit_shapes.py
_base_ = ['../quickstart/deformable_detr_vit_shapes.py']

embed_dims = 128
model = dict(bbox_head=dict(
    _delete_=True,
    type='DINOHead', num_classes=3, embed_dims=embed_dims, num_queries=30,
    num_feature_levels=3, num_dets=100,
    transformer=dict(num_heads=4, num_points=4, num_encoder_layers=2, num_decoder_layers=3,
                     feedforward_channels=512, dropout=0.0),
    # the head's default image encoding (DINO's: temperature 20, no offset); DINO's criterion
    # (densevit/models/heads/dino_head.py, DINO_CRITERION) with the classification weighted 2
    criterion=dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                   matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                cost_bbox=5.0, cost_giou=2.0),
                   loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0)),
    dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=20)))

# DINO's recipe has no slower sampling offsets (the quickstart's ViT has no lr multiplier)
optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, custom_keys={}))
