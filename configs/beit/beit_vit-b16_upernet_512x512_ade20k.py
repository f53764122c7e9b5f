# UperNet on a BEiT ViT-B/16 (Bao et al. 2022) on ADE20K, BEiT's recipe for its self-supervised
# models (the official upernet_beit_base_12_512_slide_160k_ade20k_pt.py): 512x512 crops, 160k
# iterations of 8 GPUs x 2 images, AdamW lr 7e-4, weight decay 0.05, layer-wise lr decay 0.65,
# 1500 warmup iterations then linear decay; stochastic depth 0.1, LayerScale 0.1, a relative
# position bias per layer (from the pre-trained shared one), UperNet 768 wide with an FCN
# auxiliary head on the third map (loss weight 0.4); slide test, 512 windows, stride 341.
# ADE20K mIoU in the BEiT paper (Table 3, BEiT-B self-supervised on ImageNet-1k): 45.6, 47.7
# with intermediate fine-tuning on ImageNet-1k; expected, not measured here.
# The pyramid is BEiT's: the outputs of layers 4, 6, 8 and 12 (out_indices 3, 5, 7, 11),
# rescaled by 4, 2, 1 and 1/2 (deconvolutions, max-pool; Feature2Pyramid, as MMSegmentation's
# beit-base_upernet_8xb2-160k_ade20k-640x640.py, whose checkpoints load whole into this model
# with the backbone's layer_norm_eps=1e-6: densevit/checkpoint/upernet.py).
# One difference from BEiT's recipe: the pre-trained table is resized bilinearly to the
# 32 x 32 grid on load (as Hugging Face resizes it), not by BEiT's geometric interpolation.
# Weights: a Hugging Face BEiT file as save_pretrained writes it (converted on load,
# densevit/checkpoint/beit.py), e.g. microsoft/beit-base-patch16-224-pt22k (self-supervised on
# ImageNet-22k, not the paper's ImageNet-1k model: the number above is not its number); its
# shared relative bias is copied into every layer's table on load.
#   python tools/train.py configs/beit/beit_vit-b16_upernet_512x512_ade20k.py
_base_ = [
    '../_base_/models/upernet_swin.py',  # its heads and preprocessor; the backbone replaced
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/adamw_160k.py',
]

crop_size = (512, 512)
data_preprocessor = _base_.model.data_preprocessor
pretrained = 'checkpoints/beit-base-patch16-224-pt22k/model.safetensors'
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        _delete_=True, type='VisionTransformer', arch='B', img_size=512, patch_size=16,
        with_cls_token=True, qkv_bias=(True, False, True),  # BEiT: no key bias
        layer_scale_init_value=0.1, pos_embed=dict(type='relative'),  # one bias per layer
        interpolate_mode='bilinear', layer_norm_eps=1e-12,  # as Hugging Face's BEiT
        out_indices=(3, 5, 7, 11), final_norm=False, drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(type='Feature2Pyramid', embed_dims=768, rescales=(4, 2, 1, 0.5),  # SyncBN
              in_stride=16),
    decode_head=dict(in_channels=[768, 768, 768, 768], channels=768, num_classes=150),
    auxiliary_head=dict(in_channels=768, num_classes=150),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(341, 341)))

train_dataloader = dict(batch_size=2)

# block i at lr x 0.65 ** (12 + 1 - i), the stem (patch embedding, class token) at 0.65 ** 13,
# neck and heads at 7e-4; no weight decay on norms, biases, LayerScale gammas, the class token
# and the relative bias tables (the constructor's defaults, as BEiT's)
optim_wrapper = dict(optimizer=dict(lr=7e-4, weight_decay=0.05),
                     constructor='LayerDecayOptimWrapperConstructor',
                     paramwise_cfg=dict(layer_decay_rate=0.65))
