# Trials behind the segmentation quickstart's recipe (docs/benchmarks.md); each file
# changes one thing from the one it inherits. Run one for 5 minutes on one core:
#   OMP_NUM_THREADS=1 taskset -c 0 python tools/train.py \
#       configs/studies/seg_trials/previous.py --minutes 5 --eval-every 5
# This one: the recipe before (128x128, shapes may be cut by the border or half hidden,
# AdamW 5e-4 with SegFormer's head lr x10, batch 4, decay over 3,000 iterations).
_base_ = ['../../quickstart/segformer_shapes.py']

data_root = 'data/shapes_seg_trials/cut_128/'
shapes = dict(img_size=(128, 128), max_objects=4, min_size=24, max_size=64)
# the quickstart's test pipeline, resizing to this config's image size
test_pipeline = [dict(step, scale=shapes['img_size']) if step['type'] == 'Resize' else step
                 for step in _base_.test_pipeline]
train_dataloader = dict(batch_size=4, dataset=dict(
    data_root=data_root, generate=dict(_delete_=True, **shapes, num_images=4000, seed=0)))
val_dataloader = dict(dataset=dict(
    data_root=data_root, generate=dict(_delete_=True, **shapes, num_images=200, seed=1),
    pipeline=test_pipeline))
test_dataloader = val_dataloader

max_iters = 3000
train_cfg = dict(max_iters=max_iters)
optim_wrapper = dict(optimizer=dict(lr=5e-4),
                     paramwise_cfg=dict(custom_keys={'head': dict(lr_mult=10.)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=100, end=max_iters),
]
default_hooks = dict(logger=dict(interval=100))
