# Pre-training at equal minutes, row "beit": the detection fine-tuning (the Deformable DETR quickstart on the ViT, 800 iterations)
# from BEiT (configs/studies/pretrain_minutes/beit_vit_shapes_15min.py, seed 0: its own minutes
# as the MAE's, its visual tokens from the MAE row's encoder); the ViT gets BEiT's relative
# position bias (one per layer) and LayerScale.
_base_ = ['../../beit_ssl/finetune/deformable_detr_vit_shapes_beit.py']

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/seeds/beit_vit_shapes_15min/seed0/iter_700.pth')))
