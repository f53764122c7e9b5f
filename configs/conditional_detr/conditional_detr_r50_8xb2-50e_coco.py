# Conditional DETR (Meng et al. 2021), ResNet-50, COCO 2017: the paper's 50-epoch recipe
# (8 GPUs x 2 images; paper AP 40.9). DETR's single-map detector with the conditional
# decoder: 300 queries, each with a reference point; in cross-attention the content query
# is concatenated with a spatial query sine(reference) * T(decoder embedding) per head.
# Sigmoid focal loss (alpha 0.25, gamma 2, weight 2), L1 5, GIoU 2; Hungarian costs class 2
# (focal) / L1 5 / GIoU 2; top-100 (query, class) detections. AdamW 1e-4 (backbone 1e-5),
# weight decay 1e-4, gradient clip 0.1, lr / 10 after epoch 40.
#   python tools/train.py configs/conditional_detr/conditional_detr_r50_8xb2-50e_coco.py
# HF transformers' files (ConditionalDetrForObjectDetection, model.safetensors) load as they
# are (densevit/checkpoint/conditional_detr.py); the Hub's microsoft/conditional-detr-resnet-50
# has 91 logits indexed by COCO category id: set model.bbox_head.num_classes=91 to load it.
# Proven equal to HF's model: tests/models/test_conditional_detr_vs_hf.py (docs/detr_family.md).
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/conditional_detr_r50.py',
          '../_base_/schedules/conditional_detr_50e.py', '../_base_/default_runtime.py']

model = dict(bbox_head=dict(
    type='ConditionalDETRHead', transformer=dict(dropout=0.1),
    positional_encoding=dict(temperature=10000),
    criterion=dict(loss_weights=dict(loss_cls=2.0)),
    num_dets=100))
