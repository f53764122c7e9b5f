# Vanilla DETR (parent: detr_vit_shapes_vanilla.py) + denoising training. DN queries carry the
# noised label's embedding as content and an MLP of the noised box's sine embedding as
# position; the matching queries keep DETR's learned positions and zero content.
#   python tools/train.py configs/quickstart/detr_vit_shapes_dn.py
_base_ = ['./detr_vit_shapes_vanilla.py']

model = dict(bbox_head=dict(
    dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=40)))
