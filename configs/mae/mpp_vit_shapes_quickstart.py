# Quickstart: masked patch prediction (ViT paper, Sec. 4.6 / App. B.1.2) of the same small ViT as
# mae_vit_shapes_quickstart.py, on the same unlabelled shapes images: 50% of the patches
# corrupted (80% a learned mask embedding, 10% another patch, 10% kept), each corrupted patch's
# 3-bit mean colour (512 classes) predicted from its output token.
#   python tools/train.py configs/mae/mpp_vit_shapes_quickstart.py  (500 iterations)
_base_ = ['./mae_vit_shapes_quickstart.py']

model = dict(
    _delete_=True,
    type='MaskedPatchPrediction', mask_ratio=0.5, replace_probs=(0.8, 0.1, 0.1),
    data_preprocessor={{_base_.model.data_preprocessor}},
    backbone={{_base_.model.backbone}},
    head=dict(type='MPPHead', bits=3))

# the whole sequence goes through the encoder (MAE's sees a quarter of it): an iteration costs
# about twice MAE's; 500 iterations took 9 minutes on one thread here (docs/pretraining.md)
max_iters = 500
train_cfg = dict(max_iters=max_iters, val_interval=125)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters, eta_min=0.0),
]
default_hooks = dict(checkpoint=dict(interval=125))
