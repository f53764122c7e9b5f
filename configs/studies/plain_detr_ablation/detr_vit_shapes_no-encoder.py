# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): the two DETR
# encoder layers over the map off, everything else as the quickstart (one seed each;
# docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-encoder.py --name plain_detr_ablation_no-encoder --seeds 0 --threads 1
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(num_encoder_layers=0))
