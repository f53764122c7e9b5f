# EoMT from the 10k MAE as configs/mae/finetune/eomt_vit_shapes_panoptic_mae.py was before its
# present recipe: EoMT's class loss weight 2 (and class cost 2) and the MAE fine-tunes' layer
# decay 0.75. The base of the studies here that ran on it; seeds 0-2: PQ 43.2-46.4 (worst seed
# 1), mask AP50 0.378-0.429, mIoU 53.5-55.7 (docs/eomt.md):
#   python tools/run_seeds.py configs/studies/eomt_recipe/eomt_previous.py \
#       --name eomt_vit_shapes_panoptic-mae10k --threads 1 \
#       --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/seeds/mae_vit_shapes_10k/seed0/iter_10000.pth
_base_ = ['../../mae/finetune/eomt_vit_shapes_panoptic_mae.py']

model = dict(decode_head=dict(criterion=dict(
    loss_weights=dict(loss_cls=2.0, loss_mask=5.0, loss_dice=5.0))))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.75))
