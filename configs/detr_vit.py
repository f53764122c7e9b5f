# DETR (Carion et al. 2020) on a ViT-B/16 backbone, COCO 2017, DETR's 300-epoch recipe
# (8 GPUs x 2 images). Train: python tools/train.py configs/detr_vit.py
# The backbone starts from ImageNet ViT-B/16 weights (timm layout) at the path below.
_base_ = [
    '_base_/models/detr.py',
    '_base_/datasets/coco_detection.py',
    '_base_/schedules/detr_300e.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/vit-base-p16_224.pth'
model = dict(
    data_preprocessor=dict(pad_size_divisor=16),
    backbone=dict(
        type='VisionTransformer', arch='B', img_size=224, patch_size=16, with_cls_token=True,
        drop_path_rate=0.1, out_indices=-1, final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    bbox_head=dict(
        positional_encoding=dict(num_feats=128, temperature=10000, normalize=True),
        aux_loss=True))
