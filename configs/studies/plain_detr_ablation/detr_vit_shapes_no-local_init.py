# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): BoxRPB's local
# start (PyTorch's initialisation) off, everything else as the quickstart (one seed each;
# docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-local_init.py --name plain_detr_ablation_no-local_init --seeds 0 --threads 1
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(box_rpb=dict(local_init=0.0)))
