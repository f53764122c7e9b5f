# Deformable DETR (Zhu et al. 2021, §4.2) with iterative bounding box refinement, ResNet-50,
# COCO 2017, the paper's 50-epoch recipe, batch 32 (16 GPUs x 2). Paper AP 46.2.
# Each decoder layer has its own class / box predictor; its box becomes the next layer's
# reference box. Mirrors MMDetection's deformable-detr-refine_r50_16xb2-50e_coco.py: its
# zoo checkpoint evaluates with
#   python tools/test.py configs/deformable_detr/deformable_detr_refine_r50_16xb2-50e_coco.py CKPT
_base_ = './deformable_detr_r50_16xb2-50e_coco.py'

model = dict(bbox_head=dict(with_box_refine=True))
