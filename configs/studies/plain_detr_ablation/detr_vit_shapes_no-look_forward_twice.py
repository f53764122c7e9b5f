# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): look forward
# twice (each layer's box detached from the next) off, everything else as the quickstart (one seed
# each; docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-look_forward_twice.py --name plain_detr_ablation_no-look_forward_twice --seeds 0 --threads 1
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(look_forward_twice=False))
