# Pre-training at equal minutes, row "scratch": the segmentation fine-tuning (ViT + simple feature pyramid + SegFormer head, 3,500 iterations of the segmentation quickstart's data)
# with the ViT from random weights, the same recipe (layer decay, drop path) as the other rows.
# The study: configs/studies/README.md (pretrain_minutes_seg / pretrain_minutes_det).
_base_ = ['../../mae/finetune/segformer_head_vit_shapes_mae.py']

model = dict(backbone=dict(init_cfg=None))
