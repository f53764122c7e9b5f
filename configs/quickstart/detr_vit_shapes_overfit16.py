# Overfit sanity check of vanilla DETR (parent: detr_vit_shapes_vanilla.py), trained and
# evaluated on the same 16
# images. Reaching AP50 >= 0.9 shows that matcher, losses, box coordinates and
# post-processing fit together:
#   python tools/train.py configs/quickstart/detr_vit_shapes_overfit16.py \
#       --minutes 15 --eval-every 0.5 --stop-at coco/bbox_mAP_50 0.9 --work-dir work_dirs/overfit16
_base_ = ['./detr_vit_shapes_vanilla.py']

data_root = 'data/shapes_overfit16/'
split = dict(
    type='ShapesDataset', data_root=data_root, ann_file='annotations/instances_train.json',
    data_prefix=dict(img='train/'),
    generate=dict(img_size=(128, 128), max_objects=4, min_size=24, max_size=64, seed=0,
                  num_images=16))
train_dataloader = dict(batch_size=16, dataset=split)
val_dataloader = dict(dataset=dict(split, test_mode=True, pipeline={{_base_.test_pipeline}}))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train.json')
test_evaluator = val_evaluator
