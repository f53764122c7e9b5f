# Pre-training at equal minutes, row "mae": the segmentation fine-tuning (ViT + simple feature pyramid + SegFormer head, 3,500 iterations of the segmentation quickstart's data)
# from the MAE quickstart (configs/mae/mae_vit_shapes_quickstart.py, seed 0, 4,000 iterations,
# about 15 minutes of one thread).
_base_ = ['../../mae/finetune/segformer_head_vit_shapes_mae.py']

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/seeds/mae_vit_shapes_quickstart/seed0/iter_4000.pth')))
