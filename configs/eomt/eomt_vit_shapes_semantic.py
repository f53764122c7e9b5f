# EoMT (Kerssies et al. 2025) on the shapes class maps (background, circle, rectangle,
# triangle at 96x96), from scratch, as the ViT segmentation twin
# configs/quickstart/vit_seg_shapes.py (its data, batch 8, preprocessor, AdamW at lr 1e-3
# clipped, 3,000 iterations, IoUMetric): its ViT (width 128, 4 heads, 8x8 patches: a 12x12
# grid) at 6 layers with a class token, 4 registers and LayerScale as EoMT's DINOv2 ViTs;
# 20 queries joined into the last 2 blocks; masked attention annealed per block
# (MaskAnnealingHook: poly, power 0.9, the official stagger over max_iters), none at
# inference. Semantic segmentation from the queries' class and mask predictions (seg_logits:
# per-class scores). Not tuned;
# no number measured here.
#   python tools/train.py configs/eomt/eomt_vit_shapes_semantic.py
_base_ = ['../quickstart/vit_seg_shapes.py']

img_size = 96
patch_size = 8
embed_dims = 128
num_classes = 4

# the twin's data preprocessor (patches of 8 tokens checked), training and test settings
model = dict(
    type='EoMT',
    num_queries=20,
    num_blocks=2,
    backbone=dict(
        _delete_=True, type='VisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=6, num_heads=4, feedforward_channels=512),
        img_size=img_size, patch_size=patch_size, num_register_tokens=4,
        layer_scale_init_value=1e-5, drop_path_rate=0.0),
    # in_channels and num_upscale_blocks (8x8 patches: 1, masks at 24x24) come from the ViT
    decode_head=dict(
        _delete_=True, type='EoMTHead', num_classes=num_classes,
        # EoMT's loss weights (class 2, mask 5, dice 5, no object 0.1) at 1024 points per
        # mask rather than 12544: the 24x24 masks have 576 cells
        criterion=dict(type='MaskSetCriterion', num_points=1024)))

custom_hooks = [*_base_.custom_hooks, dict(type='MaskAnnealingHook')]
