# UNETR (Hatamizadeh et al. 2022) in 2-D on the shapes class maps of the segmentation
# quickstart: a small 12-layer ViT/16 whose hidden states after layers 4, 7, 10 and the normed
# last one, with the image itself, feed UNETR's convolutional decoder; built as MONAI's
# UNETR(spatial_dims=2) is (tests/models/test_unetr_vs_monai.py proves the two equal), at
# width 96 and feature size 16. Data, batch, losses, AdamW and IoUMetric are those of
# segformer_shapes.py. Not trained for this build: no mIoU or time is claimed.
#   python tools/train.py configs/unetr/unetr_vit_shapes.py
_base_ = ['../quickstart/segformer_shapes.py']

img_size = 96  # segformer_shapes.py's: a 6 x 6 patch grid, the position table made for it
patch_size = 16  # UNETR's decoder undoes a stride of 16 in four x2 steps
embed_dims = 96

model = dict(
    type='UNETR',
    # images padded to whole patches: the decoder's image branch and the ViT's grid must meet
    data_preprocessor=dict(size_divisor=patch_size, patch_size=patch_size),
    # MONAI's ViT: 12 pre-norm layers, no class token, no qkv bias, LayerNorm eps 1e-5, a
    # learned 1D position table; hidden states of layers 3, 6, 9 (0-based, MONAI's
    # hidden_states_out[3], [6], [9]) as they are, layer 11 after the final norm
    backbone=dict(
        _delete_=True, type='VisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=12, num_heads=4,
                  feedforward_channels=4 * embed_dims),
        img_size=img_size, patch_size=patch_size, with_cls_token=False, qkv_bias=False,
        layer_norm_eps=1e-5, out_indices=(3, 6, 9, 11), drop_path_rate=0.0),
    # residual conv pairs with instance norm and LeakyReLU (the head's defaults, MONAI's)
    decode_head=dict(
        _delete_=True, type='UNETRHead', in_channels=embed_dims, channels=16, num_classes=4,
        align_corners=False, loss_decode=_base_.model.decode_head.loss_decode))

# AdamW as segformer_shapes.py (no decay on norms) at half its rate, clipped, as
# vit_seg_shapes.py does for its ViT from scratch. Not tuned by trials.
optim_wrapper = dict(optimizer=dict(lr=1e-3), clip_grad=dict(max_norm=1.0, norm_type=2))
