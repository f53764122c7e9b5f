# The previous DINO shapes quickstart with DINO's 100 denoising queries (dino_vit_shapes_dn100.py)
# and 100 matching queries in place of its 30: mixed query selection then takes the top 100
# encoder proposals of the 3 levels (DINO: 900 on COCO), more chances to start near every
# shape. Does that reach the iteration-500 mark (AP 0.41)? Seeds 0-2: AP 0.427 / 0.407 /
# 0.411 at 800 (the previous quickstart: 0.372-0.414), 0.279-0.287 at 500: no. With
# --cfg-options optim_wrapper.optimizer.lr=4e-4 (--name q100_dn100_lr4e-4) it is the model of
# configs/dino/dino_vit_shapes.py at its former rate: AP 0.548-0.587 at 800, 0.353-0.361 at 500
# (the present 8e-4: 0.620-0.698 and 0.333-0.445; docs/detr_family.md).
#   python tools/run_seeds.py configs/studies/dino_recipe/dino_vit_shapes_q100_dn100.py --name q100_dn100 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --seeds 0 --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['./dino_vit_shapes_dn100.py']

model = dict(bbox_head=dict(num_queries=100))
