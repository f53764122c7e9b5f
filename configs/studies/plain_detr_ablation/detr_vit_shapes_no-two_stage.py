# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): two-stage
# proposals (learned reference boxes) off, everything else as the quickstart (one seed each;
# docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-two_stage.py --name plain_detr_ablation_no-two_stage --seeds 0 --threads 1
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(as_two_stage=False, mixed_selection=False))
