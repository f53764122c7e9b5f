# Segmentation twin of the DETR-ViT quickstart, for the position-embedding study: the small ViT
# of detr_vit_shapes_vanilla.py / detr_vit_shapes.py (4 layers, width 128, 4 heads, 8x8
# patches, no class token) at 96x96 (12x12 tokens) + SETR's naive head, on the shapes class
# maps of segformer_shapes.py (data, batch 8, Dice + cross-entropy, IoUMetric: mIoU 0-100).
# The study's rows (configs/studies/vit_pe_seg/) change only model.backbone.pos_embed.
#   python tools/train.py configs/quickstart/vit_seg_shapes.py
_base_ = ['./segformer_shapes.py']

img_size = 96  # segformer_shapes.py's; restated: the ViT's position tables are made for it
patch_size = 8
embed_dims = 128

model = dict(
    # pad to whole patches; the token count is checked in the ViT's patches
    data_preprocessor=dict(size_divisor=patch_size, patch_size=patch_size),
    # the detection quickstart's ViT (tests/configs/test_all_configs.py compares them);
    # position embedding: its default, a learned 1D table added once after the stem
    backbone=dict(
        _delete_=True, type='VisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=img_size, patch_size=patch_size, with_cls_token=False, drop_path_rate=0.0),
    # SETR-Naive (Zheng et al. 2021) on the last layer's 12x12 map: 1x1 conv-BN-ReLU, x4
    # bilinear, classifier; the loss and prediction resize the 48x48 logits to 96x96. No token
    # LayerNorm: the ViT's final norm already normalises the tokens. The lightest head that
    # reads one ViT map, so that the position embedding, not the head, locates the shapes.
    decode_head=dict(
        _delete_=True, type='SETRUPHead', in_channels=embed_dims, channels=embed_dims,
        in_index=0, num_classes=4, norm_layer=None, num_convs=1, up_scale=4, kernel_size=1,
        dropout_ratio=0.0, norm_cfg=_base_.norm_cfg, align_corners=False,
        loss_decode=_base_.model.decode_head.loss_decode))

# AdamW as segformer_shapes.py (no decay on norms) at half its rate, clipped: a ViT from
# scratch is less forgiving than the MiT's convolutions. Not tuned by trials.
optim_wrapper = dict(optimizer=dict(lr=1e-3), clip_grad=dict(max_norm=1.0, norm_type=2))

# 3,000 iterations: about 7.5 minutes on one thread (0.147 s/it measured over 60 iterations with
# OMP_NUM_THREADS=1 beside two other trainings on the 2-core machine, + 6 validations of 2 s),
# the wall time of segformer_shapes.py's 3,500 on two threads
max_iters = 3000
train_cfg = dict(max_iters=max_iters, val_interval=500)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=1e-5, power=1.0, by_epoch=False, begin=100, end=max_iters),
]
