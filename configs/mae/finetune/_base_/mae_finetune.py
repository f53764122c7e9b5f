# What the fine-tuning configs here share: the MAE checkpoint their ViT starts from and
# MAE / ViTDet's layer-wise learning-rate decay. Variables only (a config takes them with
# {{_base_.name}}), so this file can sit beside a quickstart base that has model and
# optim_wrapper.

# the MAE quickstart's last checkpoint (configs/mae/mae_vit_shapes_quickstart.py: 4000
# iterations) as tools/train.py saved it (encoder under backbone.*;
# decoder and head are dropped on load, with a logged count). Another file:
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
mae_checkpoint = 'work_dirs/mae_vit_shapes_quickstart/iter_4000.pth'
mae_init_cfg = dict(type='Pretrained', checkpoint=mae_checkpoint)

# block i of L at lr * 0.75 ** (L + 1 - i), the patch embedding, class token and position
# table at lr * 0.75 ** (L + 1), everything after the ViT (its final norm, neck, head) at
# the full rate; the base config's paramwise_cfg.custom_keys multiply on top
layer_decay = dict(constructor='LayerDecayOptimWrapperConstructor',
                   paramwise_cfg=dict(layer_decay_rate=0.75))
