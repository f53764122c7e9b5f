# Fine-tuning from MAE: Mask2Former (through the simple feature pyramid) on the panoptic shapes (parent:
# mask2former/mask2former_vit_shapes_panoptic.py), its ViT initialised from the encoder of the MAE quickstart's
# 10,000-iteration schedule (configs/mae/mae_vit_shapes_10k.py: the same ViT, pre-trained on
# the 128-pixel shapes images), with layer-wise learning-rate decay (_base_/mae_finetune.py;
# README.md here). Train the MAE first, then:
#   python tools/train.py configs/mae/finetune/mask2former_vit_shapes_panoptic_mae.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../mask2former/mask2former_vit_shapes_panoptic.py', './_base_/mae_finetune.py']

model = dict(backbone=dict(init_cfg={{_base_.mae_init_cfg}}))
optim_wrapper = {{_base_.layer_decay}}
