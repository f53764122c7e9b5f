# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): the one-to-many
# branch off, everything else as the quickstart (one seed each; docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-one_to_many.py --name plain_detr_ablation_no-one_to_many --seeds 0 --threads 1
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(one_to_many=None))
