# DAB-DETR (Liu et al. 2022), ResNet-50, COCO 2017: the paper's 50-epoch recipe (8 GPUs x 2
# images; paper AP 42.2). DETR's single-map detector whose 300 queries are learned 4-d
# anchor boxes, refined layer by layer by the shared box head; positional query
# MLP(sine(anchor)), width / height-modulated cross-attention; PReLU FFNs, no dropout,
# image position encoding temperature 20. Sigmoid focal loss (alpha 0.25, gamma 2,
# weight 1), L1 5, GIoU 2; Hungarian costs class 2 (focal) / L1 5 / GIoU 2; top-300
# (query, class) detections (the official --num_select). AdamW 1e-4 (backbone 1e-5),
# weight decay 1e-4, gradient clip 0.1, lr / 10 after epoch 40.
#   python tools/train.py configs/dab_detr/dab_detr_r50_8xb2-50e_coco.py
# HF transformers' files (DabDetrForObjectDetection, model.safetensors) load as they are
# (densevit/checkpoint/dab_detr.py); the Hub's IDEA-Research/dab-detr-resnet-50 has 91
# logits indexed by COCO category id: set model.bbox_head.num_classes=91 to load it.
# Proven equal to HF's model: tests/models/test_dab_detr_vs_hf.py (docs/detr_family.md).
_base_ = ['../_base_/datasets/coco_detection.py', '../_base_/models/conditional_detr_r50.py',
          '../_base_/schedules/conditional_detr_50e.py', '../_base_/default_runtime.py']

model = dict(bbox_head=dict(
    type='DABDETRHead',
    transformer=dict(dropout=0.0, activation='prelu', keep_query_pos=False),
    positional_encoding=dict(temperature=20),
    criterion=dict(loss_weights=dict(loss_cls=1.0)),
    num_dets=300))  # the official --num_select
