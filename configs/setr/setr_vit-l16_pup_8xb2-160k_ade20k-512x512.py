# SETR-PUP (Zheng et al. 2021) on ViT-L/16, ADE20K, 512x512 crops, 160k iterations,
# 8 GPUs x 2 images (batch 16). ADE20K mIoU single / multi-scale (official repo):
# 48.58 / 50.09. Sliding-window inference: 512x512 windows every 341 pixels.
# The backbone starts from ImageNet-21k ViT-L/16 weights (timm layout) at the path below.
#   python tools/train.py configs/setr/setr_vit-l16_pup_8xb2-160k_ade20k-512x512.py
_base_ = [
    '../_base_/models/setr_pup.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/schedule_160k.py',
]

crop_size = (512, 512)
pretrained = 'checkpoints/vit-large-p16_in21k-384.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(341, 341)))

# SGD 0.001 (heads x10), no weight decay, poly decay (schedule_160k).
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.001, momentum=0.9, weight_decay=0.0),
    paramwise_cfg=dict(custom_keys={'head': dict(lr_mult=10.)}))

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
