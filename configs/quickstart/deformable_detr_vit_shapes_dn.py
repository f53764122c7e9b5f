# Quickstart: deformable_detr_vit_shapes.py + denoising training (DN-DETR, Li et al. 2022):
# noised copies of the ground truth (labels flipped with p 0.25, boxes jittered by up to
# their own half size) as extra decoder query groups, ~40 denoising queries per image.
#   python tools/train.py configs/quickstart/deformable_detr_vit_shapes_dn.py
_base_ = ['./deformable_detr_vit_shapes.py']

model = dict(bbox_head=dict(
    dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=40)))
