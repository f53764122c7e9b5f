# Fine-tuning from MAE: EoMT on the panoptic shapes (parent:
# eomt/eomt_vit_shapes_panoptic.py), its ViT initialised from the encoder of the MAE quickstart's
# 10,000-iteration schedule (configs/mae/mae_vit_shapes_10k.py: the same ViT, pre-trained on
# the 128-pixel shapes images), with layer-wise learning-rate decay (_base_/mae_finetune.py;
# README.md here). Train the MAE first, then:
#   python tools/train.py configs/mae/finetune/eomt_vit_shapes_panoptic_mae.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
# Two changes from EoMT's settings, each measured on these shapes (configs/studies/eomt_recipe/,
# docs/eomt.md; the recipe before them: eomt_previous.py there): the class loss and the
# matcher's class cost weighted 4 (EoMT: 2), and layer decay 0.9 (the other MAE fine-tunes:
# 0.75), so the two blocks that carry the queries learn at 0.9 and 0.81 of the rate.
_base_ = ['../../eomt/eomt_vit_shapes_panoptic.py', './_base_/mae_finetune.py']

model = dict(
    backbone=dict(init_cfg={{_base_.mae_init_cfg}}),
    decode_head=dict(criterion=dict(loss_weights=dict(loss_cls=4.0, loss_mask=5.0, loss_dice=5.0))))
optim_wrapper = dict(constructor='LayerDecayOptimWrapperConstructor',
                     paramwise_cfg=dict(layer_decay_rate=0.9))
