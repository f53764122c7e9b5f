# Two-stage Deformable DETR (Zhu et al. 2021, §4.2) with iterative box refinement, ResNet-50,
# COCO 2017, the paper's 50-epoch recipe, batch 32 (16 GPUs x 2). Paper AP 46.9.
# The encoder's top-300 boxes (class-agnostic score) seed the decoder's reference boxes and
# queries; the encoder boxes get their own losses (enc_loss_*). Mirrors MMDetection's
# deformable-detr-refine-twostage_r50_16xb2-50e_coco.py: its zoo checkpoint evaluates with
#   python tools/test.py configs/deformable_detr/deformable_detr_refine-twostage_r50_16xb2-50e_coco.py CKPT
_base_ = './deformable_detr_refine_r50_16xb2-50e_coco.py'

model = dict(bbox_head=dict(as_two_stage=True))
