# Pre-training at equal minutes, row "scratch": the detection fine-tuning (the Deformable DETR quickstart on the ViT, 800 iterations)
# with the ViT from random weights, the same recipe (layer decay, drop path) as the other rows.
# The study: configs/studies/README.md (pretrain_minutes_seg / pretrain_minutes_det).
_base_ = ['../../mae/finetune/deformable_detr_vit_shapes_mae.py']

model = dict(backbone=dict(init_cfg=None))
