# Fine-tuning from BEiT for segmentation: configs/mae/finetune/segformer_head_vit_shapes_mae.py
# (the small ViT + a simple feature pyramid + SegFormer's all-MLP head on the segmentation
# quickstart's 96-pixel shapes, layer-wise learning-rate decay 0.75) with the ViT of the BEiT
# quickstart (configs/beit_ssl/beit_vit_shapes_quickstart.py): its position code is a relative
# position bias, not a table, and its layers have LayerScale, so the fine-tuning ViT has both.
# As BEiT fine-tunes, every layer gets its own bias, each a copy of the pre-trained shared one
# (resized from the 16x16 grid of 128-pixel images to the 12x12 grid of 96-pixel ones on load).
# Pre-train BEiT first (its config says how), then:
#   python tools/train.py configs/beit_ssl/finetune/segformer_head_vit_shapes_beit.py
# From another checkpoint: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = ['../../mae/finetune/segformer_head_vit_shapes_mae.py']

beit_checkpoint = 'work_dirs/beit_vit_shapes_quickstart/iter_2000.pth'
model = dict(backbone=dict(
    pos_embed=dict(type='relative', placement='every_layer'), layer_scale_init_value=0.1,
    init_cfg=dict(type='Pretrained', checkpoint=beit_checkpoint)))
