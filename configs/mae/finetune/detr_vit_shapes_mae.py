# Fine-tuning from MAE: the DETR-on-ViT quickstart (parent: quickstart/detr_vit_shapes.py,
# Plain-DETR's head), the ViT initialised from the encoder of the MAE
# quickstart's 10,000-iteration schedule (configs/mae/mae_vit_shapes_10k.py), with
# layer-wise learning-rate decay (_base_/mae_finetune.py; README.md here). Train the MAE
# first, then:
#   python tools/train.py configs/mae/finetune/detr_vit_shapes_mae.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../quickstart/detr_vit_shapes.py', './_base_/mae_finetune.py']

model = dict(backbone=dict(drop_path_rate=0.1, init_cfg={{_base_.mae_init_cfg}}))
optim_wrapper = {{_base_.layer_decay}}
