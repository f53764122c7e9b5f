# Fine-tuning from MAE: vanilla DETR on the quickstart's small ViT
# (quickstart/detr_vit_shapes.py), the ViT initialised from the MAE quickstart's encoder
# (configs/mae/mae_vit_shapes_quickstart.py), with layer-wise learning-rate decay
# (_base_/mae_finetune.py; README.md here). Train the MAE first, then:
#   python tools/train.py configs/mae/finetune/detr_vit_shapes_mae.py \
#       --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/mae_vit_shapes_quickstart/iter_N.pth
_base_ = ['../../quickstart/detr_vit_shapes.py', './_base_/mae_finetune.py']

model = dict(backbone=dict(drop_path_rate=0.1, init_cfg={{_base_.mae_init_cfg}}))
optim_wrapper = {{_base_.layer_decay}}
