# Co-Deformable-DETR (Zong et al. 2023, "DETRs with Collaborative Hybrid Assignments
# Training"), ResNet-50, COCO 2017, 12 epochs, batch 16 (8 GPUs x 2): the Deformable DETR
# COCO recipe (configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py: strides 8 ...
# 64, its data and augmentation) with densevit's CoDeformableDETRHead
# (densevit/models/heads/co_deformable_detr_head.py): two-stage with box refinement, mixed
# query selection and look forward twice, the collaborative ATSS head on the encoder's 4
# levels plus one stride-2 level (strides 8 ... 128), its positive anchors as customized
# positive queries (position and content from the anchor, plus its map feature).
# Co-DETR's recipe (Sense-X/Co-DETR, projects/configs/co_deformable_detr/
# co_deformable_detr_r50_1x_coco.py; MMDetection 3.3 ports only Co-DINO) in what is the
# same: 300 queries, 6 + 6 layers, FFN 2048, no dropout, focal loss weight 2 / L1 5 /
# GIoU 2 (matching costs 2 / 5 / 2), the ATSS head's focal / GIoU / centerness losses at
# 1 / 2 / 1 x 6 decoder layers x lambda 2, up to 300 positive queries per image, the
# positive queries' losses at lambda 1, top-100 detections, AdamW 2e-4 with the backbone,
# sampling offsets and reference points x0.1, clip 0.1, lr / 10 after epoch 11.
# Differences from Co-DETR's (49.5 AP with both auxiliary heads): no Faster R-CNN
# auxiliary head (RPN + RoI head: it needs RoIAlign; Co-DETR has 2 auxiliary heads), so
# one ATSS head; each auxiliary head's positional-query offset is a learned D-vector
# (Co-DETR's code keeps an nn.Embedding(num_co_heads, 1, 1, 256) that it calls a bug: one
# scalar per head, the second fixed at 0, and it cannot build with one head); not trained:
# no AP measured here.
#   python tools/train.py configs/co_detr/co_deformable_detr_r50_1x_coco.py
_base_ = ['../deformable_detr/deformable_detr_refine-twostage_r50_16xb2-50e_coco.py']

model = dict(bbox_head=dict(
    type='CoDeformableDETRHead', num_queries=300, mixed_selection=True,
    look_forward_twice=True,
    transformer=dict(feedforward_channels=2048, dropout=0.0),
    # CoATSSHead's defaults are Co-DETR's: 256 channels, 1 convolution per branch, losses
    # 1 / 2 / 1 x 6 decoder layers x lambda 2
    aux_heads=[dict(type='CoATSSHead', strides=(8, 16, 32, 64, 128))],
    max_pos_queries=300))

max_epochs = 12
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=1)
optim_wrapper = dict(optimizer=dict(lr=2e-4))
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[11], gamma=0.1)
]
auto_scale_lr = dict(base_batch_size=16, enable=False)
