# DETR (Carion et al. 2020) on a Swin-T backbone (Liu et al. 2021), COCO 2017, DETR's
# 300-epoch recipe (8 GPUs x 2 images). Train: python tools/train.py configs/detr_swin-t.py
# The backbone starts from the official ImageNet-1k Swin-T weights, used as downloaded
# (official / timm / HF layouts are converted on load, and anything that does not load
# is logged as a WARNING):
#   https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_tiny_patch4_window7_224.pth
# The head reads the last stage (stride 32, 768 channels), as DETR reads ResNet's C5.
_base_ = [
    '_base_/models/detr.py',
    '_base_/datasets/coco_detection.py',
    '_base_/schedules/detr_300e.py',
    '_base_/default_runtime.py',
]

pretrained = 'checkpoints/swin_tiny_patch4_window7_224.pth'
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone=dict(
        type='SwinTransformer', arch='tiny', pretrain_img_size=224, patch_size=4, window_size=7,
        # 0.2 as in the Swin detection recipes (0.1 is the ImageNet Swin-T setting)
        drop_path_rate=0.2, out_indices=(3,), with_cp=False,
        # shifted windows in every stage, as MMDetection's Swin trains; said here so
        # the model tests as it trained (the ImageNet file alone would turn the shift off
        # where a map is no larger than the window, as the classifier did)
        always_shift=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    feat_index=-1,
    bbox_head=dict(
        positional_encoding=dict(type='sine_2d', num_feats=128, temperature=10000,
                                 normalize=True),
        aux_loss=True))

# Swin's relative position bias tables get no weight decay (as in Swin's own recipes);
# they keep the backbone's lr x0.1 of detr_300e (mmengine applies one matching key).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(lr_mult=0.1, decay_mult=0.0),
}))
