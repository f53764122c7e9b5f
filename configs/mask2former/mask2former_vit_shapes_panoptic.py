# Mask2Former (Cheng et al. 2022) on the panoptic shapes, from scratch: the twin of
# configs/eomt/eomt_vit_shapes_panoptic.py, whose data (128x128; things circle / rectangle /
# triangle on stuff bands noise / stripes / gradient), evaluators (PQ, mask AP and mIoU together),
# schedule (AdamW 1e-3 clipped, 3,000 iterations, batch 8) and ViT (width 128, 4 layers, 4 heads,
# 8x8 patches: a 16x16 grid, no class token) it takes; the model is replaced. A simple feature
# pyramid (ViTDet) makes strides 4, 8, 16, 32 from the ViT's stride-8 map; the pixel decoder's
# deformable encoder reads the last three (16x16 + 8x8 + 4x4 = 336 tokens) and its FPN step the
# stride-4 map (32x32 mask features); a small transformer decoder (width 128, 6 layers: two
# rounds over the three levels, 20 queries). Not tuned. From scratch not measured; from the MAE
# (configs/mae/finetune/mask2former_vit_shapes_panoptic_mae.py) PQ about 80 (docs/mask2former.md).
#   python tools/train.py configs/mask2former/mask2former_vit_shapes_panoptic.py
#   python tools/test.py configs/mask2former/mask2former_vit_shapes_panoptic.py CKPT --show-dir vis
_base_ = ['../eomt/eomt_vit_shapes_panoptic.py']

embed_dims = 128
model = dict(
    _delete_=True, type='Mask2Former', num_things_classes=3,
    data_preprocessor=dict(type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_val=0,
                           seg_pad_val=255, size_divisor=32, patch_size=8),
    backbone={{_base_.model.backbone}},
    neck=dict(type='SimpleFeaturePyramid', in_channels=128, out_channels=embed_dims,
              scale_factors=(2.0, 1.0, 0.5, 0.25), in_stride=8),
    pixel_decoder=dict(type='MSDeformAttnPixelDecoder', feat_channels=embed_dims,
                       out_channels=embed_dims, num_encoder_layers=2, num_heads=4,
                       feedforward_channels=512),
    # Mask2Former's loss weights at 1024 points per mask (the 32x32 masks have 1,024 cells)
    decode_head=dict(type='Mask2FormerHead', num_classes=6, num_queries=20,
                     embed_dims=embed_dims, num_layers=6, num_heads=4, feedforward_channels=512,
                     criterion=dict(type='MaskSetCriterion', num_points=1024)),
    # Mask2Former's panoptic rule (object threshold 0.8, overlap 0.8), the 100 best instances
    test_cfg=dict(mode='whole', semantic_on=True, panoptic_on=True, instance_on=True))

# as Deformable DETR: the pixel decoder's sampling offsets learn 10x slower
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'sampling_offsets': dict(lr_mult=0.1)}))
custom_hooks = [dict(type='NonFiniteLossHook'), dict(type='ProgressBarHook')]  # no annealing
