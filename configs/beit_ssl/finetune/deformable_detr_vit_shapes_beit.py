# Fine-tuning from BEiT for detection: configs/mae/finetune/deformable_detr_vit_shapes_mae.py
# (the detection quickstart, Deformable DETR on the small ViT + a simple feature pyramid, with
# the layer-wise decay constructor) with the ViT of the BEiT quickstart
# (configs/beit_ssl/beit_vit_shapes_quickstart.py): a relative position bias instead of the
# learned table, one per layer (each a copy of the pre-trained shared one, as BEiT fine-tunes;
# same 16x16 grid, so nothing is resized), and LayerScale.
# Pre-train BEiT first (its config says how), then:
#   python tools/train.py configs/beit_ssl/finetune/deformable_detr_vit_shapes_beit.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../mae/finetune/deformable_detr_vit_shapes_mae.py']

beit_checkpoint = 'work_dirs/beit_vit_shapes_quickstart/iter_2000.pth'
model = dict(backbone=dict(
    pos_embed=dict(type='relative', placement='every_layer'), layer_scale_init_value=0.1,
    init_cfg=dict(type='Pretrained', checkpoint=beit_checkpoint)))
