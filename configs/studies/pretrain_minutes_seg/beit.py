# Pre-training at equal minutes, row "beit": the segmentation fine-tuning (ViT + simple feature pyramid + SegFormer head, 3,500 iterations of the segmentation quickstart's data)
# from BEiT (configs/studies/pretrain_minutes/beit_vit_shapes_15min.py, seed 0: its own minutes
# as the MAE's, its visual tokens from the MAE row's encoder); the ViT gets BEiT's relative
# position bias (one per layer) and LayerScale.
_base_ = ['../../beit_ssl/finetune/segformer_head_vit_shapes_beit.py']

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/seeds/beit_vit_shapes_15min/seed0/iter_700.pth')))
