"""SegTTAModel / DetTTAModel (densevit/models/tta) on randomly initialised tiny models:
one view equals plain inference, views merged as an independent per-view reference
says, flips undone (symmetric input -> symmetric output), heads that cannot merge."""
import copy
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import Compose, pseudo_collate
from mmengine.registry import init_default_scope
from test_tta_nms import brute_force_nms

import densevit  # noqa: F401
from densevit.models.heads.segformer_head import SegformerHead
from densevit.models.tta.det_tta import DetTTAModel
from densevit.models.tta.nms import flip_boxes
from densevit.models.tta.seg_tta import SegTTAModel
from densevit.models.tta.support import apply_tta, tta_pipeline
from densevit.registry import MODELS

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'


def build(name):
    init_default_scope('densevit')
    cfg = Config.fromfile(str(CONFIGS / name))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model).eval()
    # images only (no annotations here), and no test Resize: each view scales the original
    # image (a test Resize's scaling: test_apply_tta_defaults_and_config_overrides)
    steps = [s for s in cfg.test_dataloader.dataset.pipeline
             if not s['type'].endswith('Annotations') and s['type'] != 'Resize']
    return cfg, model, steps


def image_file(tmp_path, img, name='img.png'):
    path = tmp_path / name
    cv2.imwrite(str(path), img)
    return str(path)


def random_image(h=64, w=80, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def run(model, pipeline, path):
    """One image through ``pipeline`` and ``model.test_step`` -> its DataSample."""
    with torch.no_grad():
        return model.test_step(pseudo_collate([Compose(pipeline)(dict(img_path=path))]))[0]


def view_pipeline(steps, ratio, flip):
    """The plain test pipeline with one Resize and one flip: the per-view reference."""
    return [steps[0], dict(type='Resize', scale_factor=ratio, keep_ratio=True),
            dict(type='RandomFlip', prob=float(flip), direction='horizontal'), *steps[1:]]


@pytest.fixture(scope='module')
def tta_seg():
    return build('tiny_segformer_shapes.py')


def in_mode(tta_seg, mode):
    """A copy of the tiny segmentor predicting whole images or sliding windows."""
    model = copy.deepcopy(tta_seg[1])
    if mode == 'slide':
        model.test_cfg = dict(mode='slide', crop_size=(32, 32), stride=(24, 24))
    return model, tta_seg[2]


@pytest.fixture(scope='module')
def tta_det():
    return build('tiny_detr_shapes.py')


@pytest.mark.parametrize('mode', ['whole', 'slide'])
def test_seg_one_view_equals_plain_inference(tta_seg, tmp_path, mode):
    model, steps = in_mode(tta_seg, mode)
    path = image_file(tmp_path, random_image())
    plain = run(model, steps, path)
    merged = run(SegTTAModel(model), tta_pipeline(steps, [1.0], flip=False), path)
    assert merged.pred_sem_seg.data.shape == (1, 64, 80)
    assert torch.equal(merged.pred_sem_seg.data, plain.pred_sem_seg.data)
    torch.testing.assert_close(merged.seg_logits.data, plain.seg_logits.data.softmax(0))


@pytest.mark.parametrize('mode', ['whole', 'slide'])
def test_seg_views_averaged_as_probabilities_at_the_original_size(tta_seg, tmp_path, mode):
    model, steps = in_mode(tta_seg, mode)
    path = image_file(tmp_path, random_image(seed=1))
    ratios = (0.5, 1.0, 1.75)
    merged = run(SegTTAModel(model), tta_pipeline(steps, ratios), path)
    views = [run(model, view_pipeline(steps, r, f), path).seg_logits.data.softmax(0)
             for r in ratios for f in (False, True)]
    assert all(v.shape[-2:] == (64, 80) for v in views)
    expected = torch.stack(views).mean(0)
    torch.testing.assert_close(merged.seg_logits.data, expected)
    assert torch.equal(merged.pred_sem_seg.data[0], expected.argmax(0))
    assert merged.tta_views == 6


def test_seg_flip_invariance_on_a_symmetric_input(tta_seg, tmp_path):
    _, model, steps = tta_seg
    half = random_image(64, 40, seed=2)
    path = image_file(tmp_path, np.concatenate([half, half[:, ::-1]], 1))
    merged = run(SegTTAModel(model), tta_pipeline(steps, [0.75, 1.0]), path)
    probs = merged.seg_logits.data
    torch.testing.assert_close(probs, probs.flip(-1), atol=1e-5, rtol=0)
    # without the flip views the tiny model's own output is not symmetric
    one = run(SegTTAModel(model), tta_pipeline(steps, [0.75, 1.0], flip=False), path)
    assert (one.seg_logits.data - one.seg_logits.data.flip(-1)).abs().max() > 1e-3


def test_det_one_view_equals_plain_inference(tta_det, tmp_path):
    _, model, steps = tta_det
    path = image_file(tmp_path, random_image(48, 64))
    plain = run(model, steps, path).pred_instances
    keep_all = DetTTAModel(model, tta_cfg=dict(nms=dict(iou_threshold=1.0)))
    merged = run(keep_all, tta_pipeline(steps, [1.0], flip=False), path).pred_instances
    order = plain.scores.argsort(descending=True, stable=True)
    assert torch.equal(merged.bboxes, plain.bboxes[order])
    assert torch.equal(merged.scores, plain.scores[order])
    assert torch.equal(merged.labels, plain.labels[order])
    # with mmdet's default IoU 0.5: plain inference de-duplicated by the reference NMS
    merged = run(DetTTAModel(model), tta_pipeline(steps, [1.0], flip=False), path).pred_instances
    keep = brute_force_nms(plain.bboxes.tolist(), plain.scores.tolist(), plain.labels.tolist(), 0.5)
    assert torch.equal(merged.bboxes, plain.bboxes[keep])


def test_det_views_mapped_back_and_merged_as_mmdet(tta_det, tmp_path):
    _, model, steps = tta_det
    path = image_file(tmp_path, random_image(48, 64, seed=3))
    ratios = (0.5, 1.0, 1.5)
    tta = DetTTAModel(model, tta_cfg=dict(nms=dict(iou_threshold=0.5), max_per_img=12))
    merged = run(tta, tta_pipeline(steps, ratios), path).pred_instances
    boxes, scores, labels = [], [], []
    for r in ratios:
        for f in (False, True):
            pred = run(model, view_pipeline(steps, r, f), path).pred_instances
            b = pred.bboxes.clone()
            if f:  # mmdet's bbox_flip on the original image: x1' = W - x2
                b[:, [0, 2]] = 64 - pred.bboxes[:, [2, 0]]
            boxes += b.tolist()
            scores += pred.scores.tolist()
            labels += pred.labels.tolist()
    keep = brute_force_nms(boxes, scores, labels, 0.5)[:12]
    torch.testing.assert_close(merged.bboxes, torch.tensor(boxes)[keep])
    torch.testing.assert_close(merged.scores, torch.tensor(scores)[keep])
    assert merged.labels.tolist() == [labels[k] for k in keep]
    assert (merged.bboxes[:, [0, 2]] <= 64).all() and (merged.bboxes[:, [1, 3]] <= 48).all()


def test_det_flip_equivariance(tta_det, tmp_path):
    """A mirrored image gives the mirrored merged boxes (the flip views are undone)."""
    _, model, steps = tta_det
    img = random_image(48, 64, seed=4)
    pipeline = tta_pipeline(steps, [1.0, 1.5])
    a = run(DetTTAModel(model), pipeline, image_file(tmp_path, img, 'a.png')).pred_instances
    b = run(DetTTAModel(model), pipeline,
            image_file(tmp_path, img[:, ::-1].copy(), 'b.png')).pred_instances
    torch.testing.assert_close(b.scores, a.scores)
    torch.testing.assert_close(b.bboxes, flip_boxes(a.bboxes, (48, 64)), atol=1e-4, rtol=0)


class NoTTAHead(SegformerHead):
    tta_merge = None


def test_a_head_that_cannot_merge_is_named(tta_seg, tta_det):
    cfg = copy.deepcopy(tta_seg[0])
    cfg.model.decode_head.type = NoTTAHead
    with pytest.raises(ValueError, match='NoTTAHead .the decode_head of EncoderDecoder. cannot '
                                         'merge augmented predictions'):
        apply_tta(cfg)
    model = copy.deepcopy(tta_seg[1])
    model.decode_head.__class__ = NoTTAHead
    with pytest.raises(ValueError, match='NoTTAHead .the decode_head of EncoderDecoder.'):
        SegTTAModel(model)
    with pytest.raises(ValueError, match='DETRHead .the bbox_head of DETR. cannot merge'):
        SegTTAModel(tta_det[1])  # boxes cannot be averaged as probabilities


def test_apply_tta_defaults_and_config_overrides(tta_seg, tta_det):
    cfg = apply_tta(copy.deepcopy(tta_seg[0]))
    assert cfg.model.type == 'SegTTAModel' and cfg.model.module.type == 'EncoderDecoder'
    aug = cfg.test_dataloader.dataset.pipeline[-1]
    # the tiny configs' test Resize to their 48x48 training size, scaled by each ratio
    assert [t['scale'] for t in aug['transforms'][0]] == [
        (24, 24), (36, 36), (48, 48), (60, 60), (72, 72), (84, 84)]
    assert [t['prob'] for t in aug['transforms'][1]] == [0., 1.]
    assert aug['transforms'][2][0]['type'] == 'LoadSegAnnotations'  # after resize and flip
    cfg = apply_tta(copy.deepcopy(tta_det[0]), ratios=[1.0, 2.0], flip=False)
    assert cfg.model.type == 'DetTTAModel' and cfg.model.tta_cfg.max_per_img == 100
    aug = cfg.test_dataloader.dataset.pipeline[-1]
    assert [t['scale'] for t in aug['transforms'][0]] == [(48, 48), (96, 96)]
    assert aug['transforms'][1][0]['type'] == 'LoadDetAnnotations'
    # a test Resize is scaled; without one the original image is; the config's own
    # tta_model / tta_pipeline win
    steps = [dict(type='LoadImage'), dict(type='Resize', scale=(100, 60), keep_ratio=True),
             dict(type='PackDetInputs')]
    assert tta_pipeline(steps, [0.5])[-1]['transforms'][0][0]['scale'] == (50, 30)
    assert tta_pipeline(tta_det[2], [0.5, 1.5])[-1]['transforms'][0] == [
        dict(type='Resize', scale_factor=r, keep_ratio=True) for r in (0.5, 1.5)]
    own = copy.deepcopy(tta_det[0])
    own.tta_model = dict(type='DetTTAModel', tta_cfg=dict(nms=dict(iou_threshold=0.6)))
    own.tta_pipeline = [dict(type='LoadImage'), dict(type='PackDetInputs')]
    cfg = apply_tta(own)
    assert cfg.model.tta_cfg.nms.iou_threshold == 0.6
    assert cfg.test_dataloader.dataset.pipeline == own.tta_pipeline
