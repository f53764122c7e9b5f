# DINO shapes quickstart with DINO's weight 1 (dino_vit_shapes_cls1.py) and the Deformable DETR
# quickstart's slower sampling offsets and reference points (lr x 0.1): is that why DINO
# lags Deformable DETR after iteration 400? One seed: AP 0.321 at 800 iterations, against
# 0.323 without (docs/detr_family.md, "DINO").
#   python tools/run_seeds.py configs/studies/dino_recipe/dino_vit_shapes_offset_lr0.1.py --name offset_lr0.1 --results docs/results/dino_recipe --work-root work_dirs/seeds/dino_recipe --seeds 0 --threads 1 --cfg-options train_cfg.val_interval=100
_base_ = ['./dino_vit_shapes_cls1.py']  # DINO's weight 1, as it ran

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'sampling_offsets': dict(lr_mult=0.1),
                                    'reference_points': dict(lr_mult=0.1)}))
