# The control for DINO's learning rate: the Deformable DETR shapes quickstart
# (configs/quickstart/deformable_detr_vit_shapes.py) at AdamW 4e-4, the DINO quickstart's rate,
# in place of its 2e-4. DINO at 4e-4 is far ahead of DINO at 2e-4; is the rate simply better for
# any DETR here? (docs/detr_family.md, "DINO")
#   python tools/run_seeds.py configs/studies/dino_recipe/deformable_detr_vit_shapes_lr4e-4.py --name deformable_lr4e-4 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --seeds 0 --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['../../quickstart/deformable_detr_vit_shapes.py']

optim_wrapper = dict(optimizer=dict(lr=4e-4))
