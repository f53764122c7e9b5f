# A bare ViT-B/16 at 224 for the analysis tools in tools/analysis/ on
# classification checkpoints (e.g. a timm ViT-B/16 converted by tools/convert/checkpoint.py),
# and for timing them. Images are normalised with ImageNet mean / std (the
# tools' default when a config has no data_preprocessor).
#   python tools/analysis/attention_distance.py configs/analysis/vit-b16_224.py CKPT IMAGES
default_scope = 'densevit'
model = dict(type='VisionTransformer', arch='B', img_size=224, patch_size=16)
