# Ablation of the DETR-on-ViT quickstart (configs/quickstart/detr_vit_shapes.py): BoxRPB's heads
# all start looking inside the box (local_pattern='inside') instead of the box, its corners and
# edges in turn, everything else as the quickstart; one seed, the quickstart's schedule stopped at
# 800 iterations (docs/detr_family.md, "The ablation").
#   python tools/run_seeds.py configs/studies/plain_detr_ablation/detr_vit_shapes_no-corners.py --name no-corners --results docs/results/plain_detr_ablation --work-root work_dirs/seeds/plain_detr_ablation --seeds 0 --threads 1 --cfg-options train_cfg.max_iters=800
_base_ = ['../../quickstart/detr_vit_shapes.py']

model = dict(bbox_head=dict(box_rpb=dict(local_pattern='inside')))
