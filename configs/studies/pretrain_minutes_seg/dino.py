# Pre-training at equal minutes, row "dino": the segmentation fine-tuning (ViT + simple feature pyramid + SegFormer head, 3,500 iterations of the segmentation quickstart's data)
# from DINO's teacher (configs/studies/pretrain_minutes/dino_vit_shapes_15min.py, seed 0, 300
# iterations); its class token and that position row are dropped on load (this ViT has none).
_base_ = ['../../mae/finetune/segformer_head_vit_shapes_mae.py']

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/seeds/dino_vit_shapes_15min/seed0/iter_300.pth',
    prefix='teacher.backbone.')))
