# Quickstart: BEiT masked image modelling (Bao et al. 2022) of the small ViT of the MAE quickstart
# (configs/mae/mae_vit_shapes_quickstart.py: width 128, 4 layers, 8x8 patches, no class token) on
# the same unlabelled shapes images, with BEiT's position code and layer scale: a relative
# position bias shared by the layers (no absolute table) and LayerScale from 0.1. About 40% of
# the 16x16 patches are masked in blocks (BEiT's algorithm), replaced by a learned mask token;
# a Linear head predicts each masked patch's visual token. The tokens are not DALL-E's (not
# available here): a k-means codebook of 512 words over the patch features of the MAE 10k
# run's encoder (densevit/models/selfsup/tokenizer.py). Make it first:
#   python tools/train.py configs/mae/mae_vit_shapes_10k.py
#   mkdir -p work_dirs/beit_tokenizer_shapes
#   python tools/pretrain/make_tokenizer.py configs/mae/mae_vit_shapes_10k.py \
#       work_dirs/mae_vit_shapes_10k/iter_10000.pth --k 512 \
#       --out work_dirs/beit_tokenizer_shapes/mae10k_k512.pth
#   python tools/train.py configs/beit_ssl/beit_vit_shapes_quickstart.py
# then fine-tune: configs/beit_ssl/finetune/segformer_head_vit_shapes_beit.py.
_base_ = ['../mae/mae_vit_shapes_quickstart.py']

tokenizer_file = 'work_dirs/beit_tokenizer_shapes/mae10k_k512.pth'
# 512 words: the shapes images hold few kinds of patch (flat or graded backgrounds, the edges
# and insides of four shape types), so DALL-E's 8,192 would leave most words near-duplicates
# and rare, while 64 would be little more than a colour; 512 is also masked patch
# prediction's class count (its chance cross-entropy, ln 512 = 6.24, is the same)
num_tokens = 512

model = dict(
    _delete_=True,
    type='BEiT', mask_ratio=0.4, min_num_patches=16, min_aspect=0.3,
    data_preprocessor={{_base_.model.data_preprocessor}},
    # the MAE quickstart's ViT (its width, depth and patches) with BEiT's position code and
    # LayerScale
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=128, num_layers=4, num_heads=4, feedforward_channels=512),
        img_size=128, patch_size=8, with_cls_token=False, drop_path_rate=0.0,
        pos_embed=dict(type='relative', placement='every_layer_shared'),
        layer_scale_init_value=0.1),
    head=dict(type='BEiTHead', num_tokens=num_tokens),
    # the teacher: the MAE quickstart's encoder (its backbone config; the weights come from
    # the tokenizer file); the same data preprocessor, so it sees the input it was trained on
    tokenizer=dict(type='KMeansTokenizer', teacher={{_base_.model.backbone}},
                   checkpoint=tokenizer_file, layer=-1, normalize=True))

# the whole sequence goes through the encoder and the teacher runs on every image: an
# iteration costs about three MAE ones; not timed in this build (docs/pretraining.md)
max_iters = 2000
train_cfg = dict(max_iters=max_iters, val_interval=500)
# BEiT's AdamW betas (0.9, 0.999), weight decay 0.05 (not on norms, biases, the mask token
# and the relative position table), with the MAE quickstart's learning rate and warm-up
optim_wrapper = dict(
    optimizer=dict(betas=(0.9, 0.999)),
    paramwise_cfg=dict(custom_keys={'mask_token': dict(decay_mult=0.0),
                                    'relative_position_bias_table': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=50, end=max_iters, eta_min=0.0),
]
