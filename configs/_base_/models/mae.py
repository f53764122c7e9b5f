# MAE (He et al. 2022): 75% of each image's patches masked, normalised-pixel targets, and the
# paper's decoder (8 layers of width 512, 16 heads, fixed 2D sine-cosine positions). The encoder,
# a VisionTransformer, is set by the configs that inherit this (model.backbone).
model = dict(
    type='MAE', mask_ratio=0.75,
    data_preprocessor=dict(type='ImgDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True),
    neck=dict(type='MAEPretrainDecoder', embed_dims=512, num_layers=8, num_heads=16,
              pos_embed='sincos_2d'),
    head=dict(type='MAEPretrainHead', norm_pix=True))
