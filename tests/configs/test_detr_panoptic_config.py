"""configs/detr_panoptic/ end to end on tiny panoptic shapes: stage 1 (boxes of every segment)
and stage 2 (the mask head on the frozen stage-1 detector, loaded with load_from) each train 2
iterations through tools/train.py, tools/test.py evaluates PQ, mask and box AP of stage 2's
checkpoint and draws its panoptic segments (--show-dir); stage 2 without a checkpoint stops
before training, naming the cause."""
import json
from pathlib import Path

import torch

from densevit.checkpoint.read import read_checkpoint

from tiny_run import isolated, load_tool, unique_names

CONFIGS = Path(__file__).resolve().parents[2] / 'configs' / 'detr_panoptic'
BOXES = CONFIGS / 'detr_vit_shapes_panoptic_boxes.py'
MASKS = CONFIGS / 'detr_vit_shapes_panoptic.py'


def tiny(base, data_root, extra='', model_extra=''):
    """``base`` shrunk: 4 generated 128-pixel images per split (at most 2 shapes), a ViT of
    width 32 and 2 layers, batches of 2, 2 iterations."""
    return f"""_base_ = [{str(base)!r}]
data_root = {str(data_root)!r} + '/'
shapes = dict(img_size=(128, 128), max_objects=2, min_size=24, max_size=48, num_images=4)
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, generate=dict(shapes, seed=0)))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, generate=dict(shapes, seed=1)))
test_dataloader = val_dataloader
model = dict(backbone=dict(arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                     feedforward_channels=64)),
             neck=dict(in_channels=32, out_channels=32),
             bbox_head=dict(embed_dims=32, num_heads=2, feedforward_channels=64,
                            num_encoder_layers=1, num_decoder_layers=2, norm_groups=8,
                            box_rpb=dict(hidden_dims=16)){model_extra})
train_cfg = dict(max_iters=2, val_interval=2)
param_scheduler = []
default_hooks = dict(checkpoint=dict(interval=2), logger=dict(interval=1))
""" + extra


EVALUATORS = """
val_evaluator = [
    dict(type='CocoPanopticMetric', ann_file=data_root + 'annotations/panoptic_val.json',
         seg_prefix=data_root + 'annotations/panoptic_val/'),
    dict(type='CocoMetric', metric=['bbox', 'segm'],
         ann_file=data_root + 'annotations/instances_val.json')]
test_evaluator = val_evaluator
"""


def test_two_stages_train_and_evaluate(tmp_path):
    data = tmp_path / 'shapes_panoptic'
    boxes = tmp_path / 'boxes.py'
    boxes.write_text(tiny(BOXES, data, """
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
"""))
    stage1 = tmp_path / 'stage1'
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(boxes), '--work-dir', str(stage1), '--cfg-options', *unique_names()]) == 0
    first = read_checkpoint(stage1 / 'iter_2.pth')
    assert not any(k.startswith('mask_head.') for k in first)

    masks = tmp_path / 'masks.py'
    # every query kept: the panoptic rule has segments to make after 2 iterations
    masks.write_text(tiny(MASKS, data, EVALUATORS
                          + f"load_from = {str(stage1 / 'iter_2.pth')!r}\n",
                          model_extra=', test_cfg=dict(object_threshold=0.0)'))
    stage2 = tmp_path / 'stage2'
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(masks), '--work-dir', str(stage2), '--cfg-options', *unique_names()]) == 0
    second = read_checkpoint(stage2 / 'iter_2.pth')
    # the detector stayed frozen at the first stage's weights; the mask head trained
    for k, v in first.items():
        assert torch.equal(second[k], v), k
    assert any(k.startswith('mask_head.decoder.') for k in second)
    records = [json.loads(line) for p in stage2.glob('*/vis_data/scalars.json')
               for line in p.read_text().splitlines()]
    trained = [r for r in records if 'loss_mask' in r]
    assert trained and all(set(r) & {'loss_cls', 'loss_bbox'} == set() for r in trained)

    out = tmp_path / 'metrics.json'
    with isolated():
        assert load_tool('tools/test.py').main(
            [str(masks), str(stage2 / 'iter_2.pth'), '--work-dir', str(tmp_path / 'test'),
             '--json', str(out), '--show-dir', 'vis', '--cfg-options', *unique_names()]) == 0
    metrics = json.loads(out.read_text())['results']
    assert {'coco_panoptic/PQ', 'coco/segm_mAP', 'coco/bbox_mAP'} <= set(metrics), metrics
    assert len(list((tmp_path / 'test').glob('*/vis/*.png'))) == 4  # the panoptic drawings


def test_second_stage_without_checkpoint_stops_before_training(tmp_path, capsys):
    masks = tmp_path / 'masks.py'
    masks.write_text(tiny(MASKS, tmp_path / 'shapes_panoptic', 'load_from = None\n'))
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(masks), '--work-dir', str(tmp_path / 'work'), '--cfg-options',
             *unique_names()]) == 1
    err = capsys.readouterr().err
    assert 'model.freeze_detector=True' in err and 'load_from' in err
    assert not (tmp_path / 'shapes_panoptic').exists()  # nothing was built or generated
