# Fine-tuning from MAE: DETR panoptic's first stage (parent:
# detr_panoptic/detr_vit_shapes_panoptic_boxes.py: boxes of the things and stuff of the panoptic
# shapes, the DETR-on-ViT quickstart's model and schedule), the ViT initialised from the encoder
# of the MAE quickstart's 10,000-iteration schedule (configs/mae/mae_vit_shapes_10k.py) with
# layer-wise learning-rate decay, as detr_vit_shapes_mae.py does on the detection shapes: the
# start EoMT's and Mask2Former's panoptic runs have (docs/mask2former.md). Train the MAE first
# (configs/mae/mae_vit_shapes_10k.py), then:
#   python tools/train.py configs/mae/finetune/detr_vit_shapes_panoptic_boxes_mae.py
# then the mask head (stage 2) on its checkpoint:
#   python tools/train.py configs/detr_panoptic/detr_vit_shapes_panoptic.py \
#       --cfg-options load_from=work_dirs/detr_vit_shapes_panoptic_boxes_mae/iter_1600.pth
# From another MAE checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../detr_panoptic/detr_vit_shapes_panoptic_boxes.py', './_base_/mae_finetune.py']

model = dict(backbone=dict(drop_path_rate=0.1, init_cfg={{_base_.mae_init_cfg}}))
optim_wrapper = {{_base_.layer_decay}}
