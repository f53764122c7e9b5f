# The 50-epoch recipe of Conditional DETR (Meng et al. 2021), which DAB-DETR (Liu et al.
# 2022) keeps: DETR's optimiser (AdamW 1e-4, backbone 1e-5, weight decay 1e-4, gradient
# clip 0.1, total batch 8 GPUs x 2 images) for 50 epochs, the lr divided by 10 after 40.
_base_ = ['./detr_300e.py']

max_epochs = 50
train_cfg = dict(max_epochs=max_epochs, val_interval=5)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[40], gamma=0.1)
]
