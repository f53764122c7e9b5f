# MAE ViT-B/16 as mae_vit-b16_800e.py, for the paper's longest schedule: 1600 epochs (40 warm-up).
_base_ = ['./mae_vit-b16_800e.py']

max_epochs = 1600
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=40,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=40, end=max_epochs, T_max=max_epochs - 40,
         eta_min=0.0, convert_to_iter_based=True),
]
