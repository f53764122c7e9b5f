"""IoUMetric against a hand-computed case and a brute-force per-pixel reference."""
import math

import numpy as np
import pytest
import torch
from mmengine.structures import PixelData

from densevit.evaluation.iou_metric import IoUMetric, area_stats
from densevit.structures import DataSample


def sample(pred, label):
    return DataSample(pred_sem_seg=PixelData(data=torch.as_tensor(pred)[None]),
                      gt_sem_seg=PixelData(data=torch.as_tensor(label)[None]))


def evaluate(pairs, num_classes, as_dict=True, **kwargs):
    metric = IoUMetric(**kwargs)
    metric.dataset_meta = dict(classes=[f'c{i}' for i in range(num_classes)])
    for pred, label in pairs:
        ds = sample(pred, label)
        metric.process({}, [ds.to_dict() if as_dict else ds])  # the Evaluator passes dicts
    return metric.evaluate(len(pairs))


def test_hand_computed_3x3():
    pred = [[0, 0, 1],
            [1, 1, 2],
            [2, 2, 2]]
    label = [[0, 1, 1],
             [1, 1, 255],
             [2, 0, 2]]
    # per pixel (pred, label): (0,0) (0,1) (1,1) (1,1) (1,1) [(2,255) dropped] (2,2) (2,0) (2,2)
    # class 0: I=1, P=2, L=2, U=3 ; class 1: I=3, P=3, L=4, U=4 ; class 2: I=2, P=3, L=2, U=3
    out = evaluate([(pred, label)], 3, iou_metrics=['mIoU', 'mDice', 'mFscore'])
    iou = [1 / 3, 3 / 4, 2 / 3]
    acc = [1 / 2, 3 / 4, 2 / 2]
    dice = [2 * 1 / 4, 2 * 3 / 7, 2 * 2 / 5]
    precision = [1 / 2, 3 / 3, 2 / 3]
    fscore = [2 * p * r / (p + r) for p, r in zip(precision, acc, strict=True)]
    expected = dict(aAcc=6 / 8, mIoU=np.mean(iou), mAcc=np.mean(acc), mDice=np.mean(dice),
                    mPrecision=np.mean(precision), mRecall=np.mean(acc), mFscore=np.mean(fscore))
    assert set(out) == set(expected)
    for key, value in expected.items():  # percent, rounded to 2 decimals
        assert out[key] == pytest.approx(100 * value, abs=0.0051), key


def brute_force(pairs, num_classes, ignore_index=255):
    """Pixel-by-pixel counting in plain Python, summed over images."""
    inter, pred_area, label_area = ([0] * num_classes for _ in range(3))
    for pred, label in pairs:
        for p, g in zip(np.ravel(pred).tolist(), np.ravel(label).tolist(), strict=True):
            if g == ignore_index:
                continue
            pred_area[p] += 1
            label_area[g] += 1
            inter[p] += p == g
    iou, acc = [], []
    for c in range(num_classes):
        union = pred_area[c] + label_area[c] - inter[c]
        iou.append(inter[c] / union if union else math.nan)
        acc.append(inter[c] / label_area[c] if label_area[c] else math.nan)
    return dict(aAcc=100 * sum(inter) / sum(label_area), mIoU=100 * np.nanmean(iou),
                mAcc=100 * np.nanmean(acc))


def test_random_maps_match_brute_force():
    rng = np.random.default_rng(0)
    num_classes = 6
    pairs = []
    for _ in range(5):
        h, w = rng.integers(3, 12, size=2)
        label = rng.integers(0, num_classes - 1, size=(h, w))  # class 5 never labelled
        label[rng.random((h, w)) < 0.2] = 255
        pred = np.where(rng.random((h, w)) < 0.6, np.where(label == 255, 0, label),
                        rng.integers(0, num_classes - 2, size=(h, w)))  # 4, 5 never predicted
        pairs.append((pred, label))
    out = evaluate(pairs, num_classes)
    ref = brute_force(pairs, num_classes)
    for key, value in ref.items():
        assert out[key] == pytest.approx(value, abs=0.006)  # rounded to 2 decimals


def test_classes_absent_from_both_are_skipped_and_nan_to_num():
    pred = label = [[0, 0], [1, 1]]
    out = evaluate([(pred, label)], 4)  # classes 2, 3 absent from prediction and labels
    assert out['mIoU'] == 100.0 and out['mAcc'] == 100.0
    out = evaluate([(pred, label)], 4, nan_to_num=0)
    assert out['mIoU'] == 50.0


def test_areas_are_summed_over_the_dataset_not_averaged_per_image():
    # image 1: class 0 perfectly right on 1 pixel; image 2: class 0 wrong on 3 pixels
    pairs = [([[0]], [[0]]), ([[1, 1, 1]], [[0, 0, 0]])]
    out = evaluate(pairs, 2)
    assert out['mIoU'] == pytest.approx(100 * np.mean([1 / 4, 0 / 3]), abs=0.0051)  # not 50


def test_process_keeps_only_small_area_arrays_and_accepts_data_samples():
    metric = IoUMetric()
    metric.dataset_meta = dict(classes=('a', 'b', 'c'))
    metric.process({}, [sample(torch.zeros(50, 60, dtype=torch.long),
                               torch.ones(50, 60, dtype=torch.long))])
    (stored,) = metric.results
    assert stored.shape == (4, 3) and stored.dtype == np.int64
    assert stored.tolist() == [[0, 0, 0], [3000, 3000, 0], [3000, 0, 0], [0, 3000, 0]]


def test_errors():
    with pytest.raises(KeyError, match='unknown iou_metrics'):
        IoUMetric(iou_metrics=['mAP'])
    with pytest.raises(ValueError, match=r'differ in size.*after Resize'):
        evaluate([([[0, 1]], [[0], [1]])], 2)
    with pytest.raises(ValueError, match='label values must be in 0..1 or 255, got \\[7\\]'):
        area_stats(torch.tensor([0, 1]), torch.tensor([7, 1]), 2)
    metric = IoUMetric()
    with pytest.raises(ValueError, match="dataset_meta\\['classes'\\]"):
        metric.process({}, [sample([[0]], [[0]])])
