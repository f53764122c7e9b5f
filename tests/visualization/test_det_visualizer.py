"""DetLocalVisualizer draws gt | pred to a PNG headless; the hook writes --show-dir files."""
import os.path as osp
from types import SimpleNamespace

import mmcv
import numpy as np
import torch
from mmengine.structures import InstanceData

from densevit.engine.visualization_hook import gt_in_original_image
from densevit.registry import HOOKS, VISUALIZERS
from densevit.structures import DataSample
from densevit.visualization.enlarge import enlarge, enlarge_factor

H, W = 120, 160


def make_sample():
    sample = DataSample(metainfo=dict(img_id=1, ori_shape=(H, W)))
    sample.gt_instances = InstanceData(
        bboxes=torch.tensor([[10., 10., 60., 50.], [90., 60., 150., 110.]]),
        labels=torch.tensor([0, 1]))
    sample.pred_instances = InstanceData(
        bboxes=torch.tensor([[12., 11., 62., 52.], [88., 58., 148., 108.], [20., 70., 50., 100.]]),
        scores=torch.tensor([0.9, 0.8, 0.1]),  # the last one is under pred_score_thr
        labels=torch.tensor([0, 1, 2]))
    return sample


def image():
    img = np.full((H, W, 3), 100, np.uint8)
    img[:, :, 1] = np.arange(W, dtype=np.uint8)[None] // 2  # not flat, so unchanged means unchanged
    return img


def test_draws_gt_and_pred_side_by_side(tmp_path):
    vis = VISUALIZERS.build(dict(type='DetLocalVisualizer', name='test_det_vis'))
    vis.dataset_meta = dict(classes=('circle', 'square', 'triangle'))
    img, out_file = image(), str(tmp_path / 'vis.png')
    vis.add_datasample('sample', img, make_sample(), out_file=out_file, pred_score_thr=0.3)
    assert osp.isfile(out_file)
    drawn = mmcv.imread(out_file, channel_order='rgb')
    # drawn enlarged: each pixel a block of S x S (boxes in the enlarged pixels)
    S = enlarge_factor((H, W))
    assert S == 5 and drawn.shape == (H * S, 2 * W * S, 3)
    gt, pred, big = drawn[:, :W * S], drawn[:, W * S:], enlarge(img, S)
    # Left edge of the first gt box (x=10), below its label; right edge of the second.
    assert (gt[150:225, 49:52] != big[150:225, 49:52]).any(axis=-1).all()
    assert (gt[425:525, 749:752] != big[425:525, 749:752]).any(axis=-1).all()
    assert (pred[175:240, 59:62] != big[175:240, 59:62]).any(axis=-1).all()
    # Far from every box: untouched; the low-score prediction (x 20..50, y 70..100) too.
    assert (gt[500:590, 10:40] == big[500:590, 10:40]).all()
    assert (pred[0:40, 500:775] == big[0:40, 500:775]).all()
    assert (pred[400:475, 99:102] == big[400:475, 99:102]).all()


def test_gt_rescaled_and_unflipped_to_original_image():
    sample = make_sample()
    sample.set_metainfo(dict(scale_factor=(2.0, 0.5), img_shape=(60, 320), flip=True,
                             flip_direction='horizontal'))
    boxes = sample.gt_instances.bboxes.clone()
    out = gt_in_original_image(sample)
    want = torch.stack([(320 - boxes[:, 2]) / 2, boxes[:, 1] / 0.5,
                        (320 - boxes[:, 0]) / 2, boxes[:, 3] / 0.5], dim=1)
    assert torch.allclose(out.gt_instances.bboxes, want)
    assert torch.equal(sample.gt_instances.bboxes, boxes)  # the model's output is not touched


def test_hook_writes_show_dir(tmp_path):
    VISUALIZERS.build(dict(type='DetLocalVisualizer', name='test_det_vis_hook'))
    img_path = str(tmp_path / 'img_0001.jpg')
    mmcv.imwrite(image()[..., ::-1], img_path)
    sample = make_sample()
    sample.set_metainfo(dict(img_path=img_path))
    hook = HOOKS.build(dict(type='DetVisualizationHook', draw=True, test_out_dir='show'))
    runner = SimpleNamespace(work_dir=str(tmp_path), timestamp='20240101_000000', iter=0)
    hook.after_test_iter(runner, 0, dict(inputs=[torch.zeros(3, H, W)]), [sample])
    out_file = tmp_path / '20240101_000000' / 'show' / 'img_0001.jpg'
    S = enlarge_factor((H, W))  # a small image is drawn enlarged
    assert mmcv.imread(str(out_file)).shape == (H * S, 2 * W * S, 3)


def test_boxes_on_the_border_draw_without_warnings(recwarn):
    """A box whose edge lies on the image border (x2 = width) or beyond is drawn clipped,
    without mmengine's "out of bounds" warnings (seen on every --show-dir image before)."""
    vis = VISUALIZERS.build(dict(type='DetLocalVisualizer', name='test_det_vis_border'))
    vis.dataset_meta = dict(classes=('circle', 'square', 'triangle'))
    instances = InstanceData(bboxes=torch.tensor([[100., 60., W, H], [-5., -5., 30., 30.]]),
                             labels=torch.tensor([0, 1]), scores=torch.tensor([0.9, 0.8]))
    drawn = vis.draw_instances(image(), instances)
    assert drawn.shape == (H, W, 3)
    assert not (drawn == image()).all()
    assert not [w for w in recwarn if 'out of bounds' in str(w.message)]
