# The vanilla DETR shapes recipe shrunk to run in seconds on a CPU: tests of tools/ and
# densevit/engine/ train it for a handful of iterations. Tests set data_root (and
# the paths derived from it) with tests/tools/tiny_run.py:write_config.
_base_ = ['../../configs/quickstart/detr_vit_shapes_vanilla.py']

img_size = 48
tiny_shapes = dict(img_size=(img_size, img_size), max_objects=2, min_size=10, max_size=24)

model = dict(
    backbone=dict(
        arch=dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64),
        img_size=img_size, patch_size=8, drop_path_rate=0.0),
    bbox_head=dict(
        embed_dims=32, num_queries=5,
        transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                         feedforward_channels=64, dropout=0.0)))

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
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[3], gamma=0.1),
]
default_hooks = dict(
    logger=dict(interval=1),  # log_metric_by_epoch=False comes from the quickstart config
    checkpoint=dict(interval=2, max_keep_ckpts=3))
log_processor = dict(window_size=1)
randomness = dict(seed=0, deterministic=True)
