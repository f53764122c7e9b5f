# What the SETR variants (Zheng et al. 2021; setr_naive.py, setr_pup.py, setr_mla.py) share:
# a ViT-L/16 encoder for 512x512 crops (dropout 0.1, no final norm), starting from
# ImageNet-21k ViT-L/16 weights (timm layout) at the path below, and sliding-window
# inference (512x512 windows every 341 pixels). The variants set the encoder layers they
# read, the class token and the heads (150 classes: ADE20K).
norm_cfg = dict(type='SyncBN', requires_grad=True)  # plain BN on one process
pretrained = 'checkpoints/vit-large-p16_in21k-384.pth'
data_preprocessor = dict(
    type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True, pad_val=0, seg_pad_val=255,
    size_divisor=16)  # ViT needs whole patches, also in sliding windows at image borders
model = dict(
    type='EncoderDecoder',
    data_preprocessor=dict(data_preprocessor, size=(512, 512)),  # ade20k.py's crop_size
    backbone=dict(
        type='VisionTransformer', arch='L', img_size=512, patch_size=16, drop_rate=0.1,
        final_norm=False, interpolate_mode='bilinear',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    train_cfg=dict(),
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
