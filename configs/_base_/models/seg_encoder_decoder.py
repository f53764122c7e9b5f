# What MMSegmentation's encoder-decoder model bases share (SegFormer's, UperNet's): the data
# preprocessor (ImageNet mean / std on RGB; images padded with 0, labels with 255, the
# ignore label) and whole-image inference. A model base adds the backbone and heads; a
# final config sets the preprocessor's size.
norm_cfg = dict(type='SyncBN', requires_grad=True)  # plain BN on one process
model = dict(
    type='EncoderDecoder',
    data_preprocessor=dict(
        type='SegDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_val=0, seg_pad_val=255),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))
