# SETR-Naive (Zheng et al. 2021) on ViT-L/16, ADE20K, 512x512 crops, 160k iterations,
# 8 GPUs x 2 images (batch 16): MMSegmentation's setr_vit-l_naive_8xb2-160k_ade20k-512x512.py
# (same model, pipelines, sliding-window test and schedule). ADE20K mIoU single / multi-scale:
# 48.28 / 49.56 (mmseg model zoo), 48.06 / 48.80 (official repo). mmseg's checkpoint evaluates
# as is (converted on load, densevit/checkpoint/setr.py):
#   https://download.openmmlab.com/mmsegmentation/v0.5/setr/setr_naive_512x512_160k_b16_ade20k/setr_naive_512x512_160k_b16_ade20k_20210619_191258-061f24f5.pth
#   python tools/test.py configs/setr/setr_vit-l16_naive_8xb2-160k_ade20k-512x512.py CKPT
# Training starts from ImageNet-21k ViT-L/16 weights (timm layout) at the path in
# ../_base_/models/setr_vit-l16.py:
#   python tools/train.py configs/setr/setr_vit-l16_naive_8xb2-160k_ade20k-512x512.py
_base_ = [
    '../_base_/models/setr_naive.py',  # ViT-L/16 weights, 512 crops, slide inference: setr_vit-l16.py
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/setr_160k.py',
]

# mmseg's Naive recipe trains with a 10x larger learning rate than PUP and MLA
optim_wrapper = dict(optimizer=dict(lr=0.01))
