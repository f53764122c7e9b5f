# SETR-Naive (Zheng et al. 2021) on ViT-L/16, ADE20K, 512x512 crops, 160k iterations,
# 8 GPUs x 2 images (batch 16). ADE20K mIoU single / multi-scale (official repo):
# 48.06 / 48.80. Sliding-window inference: 512x512 windows every 341 pixels.
# The backbone starts from ImageNet-21k ViT-L/16 weights (timm layout) at the path below.
#   python tools/train.py configs/setr/setr_vit-l16_naive_8xb2-160k_ade20k-512x512.py
_base_ = [
    '../_base_/models/setr_naive.py',  # ViT-L/16 weights, 512 crops, slide inference: setr_vit-l16.py
    '../_base_/datasets/ade20k.py',
    '../_base_/seg_runtime.py',
    '../_base_/schedules/setr_160k.py',
]
