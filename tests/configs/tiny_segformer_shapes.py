# The segmentation quickstart shrunk to run in seconds on a CPU (SegFormer with a
# one-block-per-stage MiT, 48x48 shapes): tests of tools/, densevit/engine/ and
# densevit/apis/ train and test it for a handful of iterations. Tests set data_root
# with tests/tools/tiny_run.py:write_seg_config.
_base_ = ['../../configs/quickstart/segformer_shapes.py']

img_size = 48
tiny_shapes = dict(img_size=(img_size, img_size), max_objects=2, min_size=10, max_size=24)

model = dict(
    backbone=dict(arch=None, embed_dims=[8, 16, 24, 32], num_layers=[1, 1, 1, 1],
                  num_heads=[1, 1, 1, 1]),
    decode_head=dict(in_channels=[8, 16, 24, 32], channels=16, dropout_ratio=0.0))

# the quickstart's test pipeline, resizing to this config's image size
test_pipeline = [dict(step, scale=(img_size, img_size)) if step['type'] == 'Resize' else step
                 for step in _base_.test_pipeline]

train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(generate=dict(tiny_shapes, num_images=8, seed=0)))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(generate=dict(tiny_shapes, num_images=5, seed=1), pipeline=test_pipeline))
test_dataloader = val_dataloader

max_iters = 4
train_cfg = dict(max_iters=max_iters, val_interval=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=2),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=2, end=max_iters),
]
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=2, max_keep_ckpts=3))
log_processor = dict(window_size=1)
randomness = dict(seed=0, deterministic=True)
