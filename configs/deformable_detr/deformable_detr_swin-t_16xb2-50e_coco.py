# Deformable DETR with a Swin-T backbone (stages 2-4: strides 8/16/32, + one extra level),
# COCO 2017, the paper's 50-epoch recipe, batch 32 (16 GPUs x 2).
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/deformable_detr.py',
          '../_base_/schedules/deformable_detr_50e.py', '../_base_/default_runtime.py']

pretrained = 'checkpoints/swin_tiny_patch4_window7_224.pth'
model = dict(
    data_preprocessor=dict(pad_size_divisor=32),
    backbone=dict(
        type='SwinTransformer', arch='tiny', pretrain_img_size=224, patch_size=4, window_size=7,
        drop_path_rate=0.2, out_indices=(1, 2, 3),
        always_shift=True,  # as MMDetection's Swin (see configs/detr_swin-t.py)
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(lr_mult=0.1, decay_mult=0.0)}))
