# UperNet + Swin-T on ADE20K, MMSegmentation's recipe
# (swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py): 512x512 crops,
# 160k iterations, 8 GPUs x 2 images. ADE20K mIoU single / multi-scale + flip: 44.41 / 45.79
# in mmseg's model zoo (its metafile.yaml), expected, not measured here.
# Mirrors the zoo config (model, data pipeline, whole-image test at the (2048, 512) resize),
# so its checkpoint evaluates as is (converted on load, densevit/checkpoint/upernet.py):
#   https://download.openmmlab.com/mmsegmentation/v0.5/swin/upernet_swin_tiny_patch4_window7_512x512_160k_ade20k_pretrain_224x224_1K/upernet_swin_tiny_patch4_window7_512x512_160k_ade20k_pretrain_224x224_1K_20210531_112542-e380ad3e.pth
#   python tools/test.py configs/upernet/upernet_swin_t_512x512_ade20k.py CKPT
# Training starts from ImageNet-1k Swin-T weights at the path below (the official
# swin_tiny_patch4_window7_224.pth or mmseg's swin_tiny_patch4_window7_224_20220317-1cdeb081.pth;
# either is converted on load):
#   python tools/train.py configs/upernet/upernet_swin_t_512x512_ade20k.py
# One difference from mmseg's recipe: densevit's CrossEntropyLoss averages over the labelled
# pixels (avg_non_ignore=True), mmseg's default over all of them, ignored ones included.
_base_ = [
    '../_base_/models/upernet_swin.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/adamw_160k.py',
]

crop_size = (512, 512)
# a top-level copy of the model's preprocessor (mmseg's layout; the Runner only reads it
# where the model has none)
data_preprocessor = _base_.model.data_preprocessor
pretrained = 'checkpoints/swin_tiny_patch4_window7_224.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(num_classes=150),
    auxiliary_head=dict(num_classes=150))

# AdamW 6e-5 with warmup and linear decay (adamw_160k.py); no weight decay on position
# embeddings, relative-position bias tables and norms.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'absolute_pos_embed': dict(decay_mult=0.),
    'relative_position_bias_table': dict(decay_mult=0.),
    'norm': dict(decay_mult=0.)}))

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
