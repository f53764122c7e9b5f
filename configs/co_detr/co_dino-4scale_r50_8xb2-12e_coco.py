# Co-DINO (Zong et al. 2023, "DETRs with Collaborative Hybrid Assignments Training"), 4
# scales, ResNet-50, COCO 2017, 12 epochs, batch 16 (8 GPUs x 2): DINO 4-scale
# (configs/dino/dino-4scale_r50_8xb2-12e_coco.py, its data, augmentation and schedule) with
# densevit's CoDINOHead (densevit/models/heads/co_dino_head.py): the collaborative ATSS head
# on the encoder's 4 levels plus one stride-2 level (strides 8 ... 128), its positive
# anchors as customized positive queries, the quality focal loss for every DETR query.
# MMDetection's Co-DINO recipe (projects/CO-DETR, co_dino_5scale_r50_8xb2_1x_coco.py) in
# what is the same: 900 queries, 6 + 6 layers, FFN 2048, no dropout, 100 DN queries,
# quality focal loss weight 1 (beta 2) / L1 5 / GIoU 2, the ATSS head's focal / GIoU /
# centerness losses at 1 / 2 / 1 x 6 decoder layers x lambda 2, up to 300 positive queries
# per image, top-300 detections, AdamW 2e-4 (DINO: 1e-4) with the backbone x0.1, clip 0.1,
# lr / 10 after epoch 11. Differences from MMDetection's (52.1 AP with 5 scales and LSJ,
# about 50 without LSJ): 4 scales (MMDetection: 5, from stride 4, and a 6-level ATSS head),
# no Faster R-CNN auxiliary head (it needs RoIAlign; Co-DINO has 2 auxiliary heads), no
# soft-NMS at test (Co-DINO: soft-NMS at IoU 0.8), not trained: no AP measured here.
#   python tools/train.py configs/co_detr/co_dino-4scale_r50_8xb2-12e_coco.py
_base_ = ['../dino/dino-4scale_r50_8xb2-12e_coco.py']

num_decoder_layers, loss_lambda = 6, 2.0
model = dict(bbox_head=dict(
    type='CoDINOHead',
    criterion=dict(quality_focal=True),
    aux_heads=[dict(type='CoATSSHead', feat_channels=256, stacked_convs=1,
                    strides=(8, 16, 32, 64, 128),
                    loss_weights=dict(loss_cls=1.0 * num_decoder_layers * loss_lambda,
                                      loss_bbox=2.0 * num_decoder_layers * loss_lambda,
                                      loss_centerness=1.0 * num_decoder_layers * loss_lambda))],
    max_pos_queries=300))

optim_wrapper = dict(optimizer=dict(lr=2e-4))
