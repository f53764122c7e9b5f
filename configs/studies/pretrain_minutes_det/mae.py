# Pre-training at equal minutes, row "mae": the detection fine-tuning (the Deformable DETR quickstart on the ViT, 800 iterations)
# from the MAE quickstart (configs/mae/mae_vit_shapes_quickstart.py, seed 0, 4,000 iterations,
# about 15 minutes of one thread).
_base_ = ['../../mae/finetune/deformable_detr_vit_shapes_mae.py']

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/seeds/mae_vit_shapes_quickstart/seed0/iter_4000.pth')))
