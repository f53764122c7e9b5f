# What the SETR variants (Zheng et al. 2021; setr_naive.py, setr_pup.py, setr_mla.py) share,
# as MMSegmentation's ADE20K zoo configs (setr_vit-l_*_8xb2-160k_ade20k-512x512.py) build it,
# so that mmseg's trained SETR checkpoints evaluate here unchanged (they are converted on load:
# densevit/checkpoint/setr.py): a ViT-L/16 encoder for 512x512 crops (no dropout, no final
# norm, LayerNorm eps 1e-6, position table resized bilinearly), starting from ImageNet-21k
# ViT-L/16 weights (timm layout) at the path below, and sliding-window inference (512x512
# windows every 341 pixels). As mmseg, images are not padded at test time: a window at the
# border of an image under 512 pixels is padded to whole patches inside the ViT
# (pad_to_patch, mmseg's patch_pad='corner') and its logits resized back to the window.
# The variants set the encoder layers they read, the class token and the heads (150 classes).
norm_cfg = dict(type='SyncBN', requires_grad=True)  # plain BN on one process
pretrained = 'checkpoints/vit-large-p16_in21k-384.pth'
data_preprocessor = dict(
    type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True, pad_val=0, seg_pad_val=255)
model = dict(
    type='EncoderDecoder',
    data_preprocessor=dict(data_preprocessor, size=(512, 512)),  # ade20k.py's crop_size
    backbone=dict(
        type='VisionTransformer', arch='L', img_size=512, patch_size=16, drop_rate=0.,
        layer_norm_eps=1e-6, final_norm=False, interpolate_mode='bilinear', pad_to_patch=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    train_cfg=dict(),
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
