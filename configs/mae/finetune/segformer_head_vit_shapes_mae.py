# Fine-tuning from MAE for segmentation: the ViT of the MAE quickstart's 10,000-iteration
# schedule (configs/mae/mae_vit_shapes_10k.py) with a simple feature pyramid (ViTDet: strides
# 4, 8 and 16 from the ViT's stride-8 map) and SegFormer's all-MLP head, on the
# segmentation quickstart's shapes (quickstart/segformer_shapes.py: 96x96 images, 4
# classes), with layer-wise learning-rate decay (_base_/mae_finetune.py; README.md here).
# Train the MAE first, then:
#   python tools/train.py configs/mae/finetune/segformer_head_vit_shapes_mae.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../quickstart/segformer_shapes.py', './_base_/mae_finetune.py']

width = 128
model = dict(
    data_preprocessor=dict(size_divisor=16),  # patches of 8, then the pyramid's 2x pooling
    # the ViT of quickstart/detr_vit_shapes.py (pre-trained on its 128-pixel images; the
    # position table is resized to the 12x12 grid of a 96-pixel image on load)
    backbone=dict(
        _delete_=True, type='VisionTransformer',
        arch=dict(embed_dims=width, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=96, patch_size=8, with_cls_token=False, drop_path_rate=0.1,
        init_cfg={{_base_.mae_init_cfg}}),
    neck=dict(type='SimpleFeaturePyramid', in_channels=width, out_channels=width,
              scale_factors=(2.0, 1.0, 0.5), in_stride=8),
    decode_head=dict(in_channels=[width] * 3, in_index=[0, 1, 2]))

# the quickstart's AdamW (lr 2e-3, not tuned for fine-tuning) for pyramid and head, the ViT's
# blocks decayed layer by layer; its custom_keys (no weight decay on norms) still apply
optim_wrapper = {{_base_.layer_decay}}
