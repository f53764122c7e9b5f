# SegFormer-B0 (Xie et al. 2021) on ADE20K, 512x512 crops, 160k iterations, 8 GPUs x 2
# images. ADE20K mIoU single-scale: 37.41 (MMSegmentation), 37.4 (paper).
# Mirrors MMSegmentation's config of the same name (model, data pipeline, test settings:
# whole-image inference at the (2048, 512) test resize), so its zoo checkpoint evaluates as is:
#   python tools/test.py configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py \
#       segformer_mit-b0_512x512_160k_ade20k_20210726_101530-8ffa8fda.pth
# The official NVlabs (segformer.b0.512x512.ade.160k.pth) and Hugging Face
# (nvidia/segformer-b0-finetuned-ade-512-512) models use the paper's Linear head: add
#   --cfg-options model.decode_head.proj_type=linear
# The encoder starts from ImageNet-1k MiT-B0 weights at the path below (MMSegmentation's
# mit_b0_20220624-7e0fe6dd.pth, or the official / Hugging Face file; converted on load).
#   python tools/train.py configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py
_base_ = [
    '../_base_/models/segformer_mit-b0.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/adamw_160k.py',
]

crop_size = (512, 512)
# a top-level copy of the model's preprocessor (mmseg's layout; the Runner only reads it
# where the model has none)
data_preprocessor = _base_.model.data_preprocessor
pretrained = 'checkpoints/mit_b0.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(num_classes=150),
    test_cfg=dict(mode='whole'))

# AdamW 6e-5 with warmup and linear decay (adamw_160k.py); head lr x10, no weight decay on
# norms (and position blocks, where a backbone has them).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_block': dict(decay_mult=0.),
    'norm': dict(decay_mult=0.),
    'head': dict(lr_mult=10.)}))

train_dataloader = dict(batch_size=2, num_workers=2)
val_dataloader = dict(batch_size=1, num_workers=4)
test_dataloader = val_dataloader
