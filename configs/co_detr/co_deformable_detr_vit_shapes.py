# Quickstart-size Co-Deformable-DETR on the shapes: the Deformable DETR shapes quickstart
# (configs/quickstart/deformable_detr_vit_shapes.py: the small ViT, its simple feature
# pyramid, 3 levels of strides 8, 16, 32, 30 queries, box refinement, the data and schedule)
# made Co-DETR's query head -- two-stage, mixed query selection, look forward twice -- with
# the collaborative ATSS head on the encoder's 3 levels plus the extra stride-64 level and
# its positives fed back to the decoder as customized positive queries
# (densevit/models/heads/co_deformable_detr_head.py). The ATSS losses weigh Co-DETR's
# 1 / 2 / 1 times decoder layers (3 here, 6 in Co-DETR) times lambda 2. Inference is the
# two-stage Deformable DETR's. Not trained on the shapes yet: no AP measured.
#   python tools/train.py configs/co_detr/co_deformable_detr_vit_shapes.py
_base_ = ['../quickstart/deformable_detr_vit_shapes.py']

num_decoder_layers, loss_lambda = 3, 2.0
model = dict(bbox_head=dict(
    type='CoDeformableDETRHead', as_two_stage=True, mixed_selection=True,
    look_forward_twice=True,
    aux_heads=[dict(type='CoATSSHead', feat_channels=128, strides=(8, 16, 32, 64),
                    loss_weights=dict(loss_cls=1.0 * num_decoder_layers * loss_lambda,
                                      loss_bbox=2.0 * num_decoder_layers * loss_lambda,
                                      loss_centerness=1.0 * num_decoder_layers * loss_lambda))],
    max_pos_queries=300))
