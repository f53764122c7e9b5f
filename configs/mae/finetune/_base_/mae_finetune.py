# What the fine-tuning configs here share: the MAE checkpoint their ViT starts from and
# MAE / ViTDet's layer-wise learning-rate decay. Variables only (a config takes them with
# {{_base_.name}}), so this file can sit beside a quickstart base that has model and
# optim_wrapper.

# the last checkpoint of the MAE quickstart's 10,000-iteration schedule
# (configs/mae/mae_vit_shapes_10k.py; the 4,000-iteration quickstart's encoder helps less,
# docs/pretraining.md) as tools/train.py saved it (encoder under backbone.*; decoder and
# head are dropped on load, with a logged count). Another file, e.g. the quickstart's:
#   --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/mae_vit_shapes_quickstart/iter_4000.pth
mae_checkpoint = 'work_dirs/mae_vit_shapes_10k/iter_10000.pth'
mae_init_cfg = dict(type='Pretrained', checkpoint=mae_checkpoint)

# block i of L at lr * 0.75 ** (L + 1 - i), the patch embedding, class token and position
# table at lr * 0.75 ** (L + 1), everything after the ViT (its final norm, neck, head) at
# the full rate; the base config's paramwise_cfg.custom_keys multiply on top
layer_decay = dict(constructor='LayerDecayOptimWrapperConstructor',
                   paramwise_cfg=dict(layer_decay_rate=0.75))
