# configs/detr_vit.py (DETR on a plain ViT-B/16: Plain-DETR's head, 12 epochs) with the ViT
# from MAE pre-training (He et al. 2022) instead of supervised ImageNet weights.
#   python tools/train.py configs/detr_vit_mae.py
#
# Weights: the official MAE ViT-B/16 encoder, https://dl.fbaipublicfiles.com/mae/pretrain/
# mae_pretrain_vit_base.pth, saved as the path below (or a densevit MAE run's iter_N.pth,
# configs/mae/). MAE normalises with ImageNet statistics, so this config does too. MAE adds
# 2.6 AP to Plain-DETR's Swin-V2-S (its SimMIM); on COCO here: expected, not measured.
_base_ = ['./detr_vit.py']

pretrained = 'checkpoints/mae_pretrain_vit_base.pth'
model = dict(
    data_preprocessor=dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
    backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
