"""Semantic segmentation metrics from per-class pixel areas summed over the dataset.

Per image (pixels labelled ``ignore_index`` dropped), per class c:
    I_c = #(pred == c and label == c),  P_c = #(pred == c),  L_c = #(label == c)
summed over all images, then U_c = P_c + L_c - I_c and
    IoU_c = I_c / U_c,  Acc_c = I_c / L_c,  Dice_c = 2 I_c / (P_c + L_c),
    Precision_c = I_c / P_c,  Recall_c = Acc_c,
    Fscore_c = (1 + b^2) Precision_c Recall_c / (b^2 Precision_c + Recall_c),
    aAcc = sum I / sum L.
This is the dataset-level IoU of MMSegmentation and the ADE20K benchmark, not a mean
of per-image IoUs. A class with a zero denominator (e.g. absent from both prediction
and labels) gets NaN, which the means skip. Results are in percent, rounded to two
decimals, as MMSegmentation reports them.
"""
from collections import OrderedDict

import numpy as np
import torch
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from densevit.registry import METRICS

# per-class columns of each requested metric
_COLUMNS = dict(mIoU=('IoU', 'Acc'), mDice=('Dice', 'Acc'),
                mFscore=('Fscore', 'Precision', 'Recall'))


def _get(obj, key):
    return obj[key] if isinstance(obj, dict) else getattr(obj, key)


def labelled_pixels(pred, label, num_classes, ignore_index=255):
    """The labelled pixels of one image: (pred, label) int64 [N], the pixels whose label is
    ``ignore_index`` dropped; refused when a label or a prediction is outside 0..K-1."""
    keep = label != ignore_index
    pred, label = pred[keep].long(), label[keep].long()
    if len(label) and (label.min() < 0 or label.max() >= num_classes):
        raise ValueError(f'label values must be in 0..{num_classes - 1} or {ignore_index}, '
                         f'got {sorted(set(label.unique().tolist()) - set(range(num_classes)))}')
    if len(pred) and (pred.min() < 0 or pred.max() >= num_classes):
        raise ValueError(f'predicted classes must be in 0..{num_classes - 1}')
    return pred, label


def area_stats(pred, label, num_classes, ignore_index=255):
    """Per-class pixel areas of one image.

    Args:
        pred, label (Tensor): integer maps of the same shape (any number of dims).

    Returns:
        Tensor: int64 [4, K]: intersection, union, prediction area, label area.
    """
    pred, label = labelled_pixels(pred, label, num_classes, ignore_index)
    inter = torch.bincount(pred[pred == label], minlength=num_classes)
    area_pred = torch.bincount(pred, minlength=num_classes)
    area_label = torch.bincount(label, minlength=num_classes)
    return torch.stack([inter, area_pred + area_label - inter, area_pred, area_label])


def confusion_counts(pred, label, num_classes, ignore_index=255):
    """Pixel counts of one image by (label, prediction): int64 [K, K], row = the label, column
    = the predicted class, pixels labelled ``ignore_index`` left out. Its diagonal, column
    sums and row sums are :func:`area_stats`' intersection, prediction and label areas."""
    pred, label = labelled_pixels(pred, label, num_classes, ignore_index)
    return torch.bincount(label * num_classes + pred,
                          minlength=num_classes * num_classes).view(num_classes, num_classes)


def _ratio(num, den):
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def class_metrics(totals, beta=1):
    """[4, K] summed areas -> dict of per-class fractions [K] (NaN where undefined)."""
    inter, union, area_pred, area_label = totals.astype(np.float64)
    precision, recall = _ratio(inter, area_pred), _ratio(inter, area_label)
    b2 = beta ** 2
    return dict(IoU=_ratio(inter, union), Acc=recall,
                Dice=_ratio(2 * inter, area_pred + area_label),
                Precision=precision, Recall=recall,
                Fscore=_ratio((1 + b2) * precision * recall, b2 * precision + recall))


@METRICS.register_module()
class IoUMetric(BaseMetric):
    """mIoU / mAcc / aAcc (and optionally mDice, mFscore, mPrecision, mRecall).

    Args:
        ignore_index (int): label value left out of every area.
        iou_metrics (list[str]): any of 'mIoU', 'mDice', 'mFscore'.
        nan_to_num (float, optional): replace per-class NaN with this before averaging
            (then an absent class counts as this value instead of being skipped).
        beta (float): F-score weight of recall.
        collect_device, prefix: see ``mmengine.evaluator.BaseMetric`` (no default
            prefix: keys are ``aAcc``, ``mIoU``... as in MMSegmentation).

    Each image is kept as one int64 [4, K] array of areas (2.4 kB for ADE20K), so
    memory grows with the dataset only by that, and mmengine can gather the
    arrays from every rank before ``compute_metrics`` sums them. Needs
    ``dataset_meta['classes']`` (the runner sets it from the dataset) and, in each
    data sample, ``pred_sem_seg`` and ``gt_sem_seg`` of the same size.
    """

    default_prefix = None

    def __init__(self, ignore_index=255, iou_metrics=('mIoU',), nan_to_num=None, beta=1,
                 collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        iou_metrics = [iou_metrics] if isinstance(iou_metrics, str) else list(iou_metrics)
        unknown = set(iou_metrics) - set(_COLUMNS)
        if unknown:
            raise KeyError(f'unknown iou_metrics {sorted(unknown)}; choose from {list(_COLUMNS)}')
        self.ignore_index = ignore_index
        self.iou_metrics = iou_metrics
        self.nan_to_num = nan_to_num
        self.beta = beta

    def _num_classes(self):
        classes = (self.dataset_meta or {}).get('classes')
        if not classes:
            raise ValueError("IoUMetric needs dataset_meta['classes'] (set by the runner from "
                             'the dataset, or metric.dataset_meta = dict(classes=...))')
        return len(classes)

    def process(self, data_batch, data_samples):
        num_classes = self._num_classes()
        for sample in data_samples:
            pred = _get(_get(sample, 'pred_sem_seg'), 'data').squeeze(0)
            label = _get(_get(sample, 'gt_sem_seg'), 'data').squeeze(0).to(pred.device)
            if pred.shape != label.shape:
                meta = sample if isinstance(sample, dict) else sample.metainfo
                raise ValueError(
                    f"prediction {tuple(pred.shape)} and label {tuple(label.shape)} of "
                    f"{meta.get('img_path', 'an image')} differ in size: labels must stay at "
                    'the original size (load them after Resize in the test pipeline)')
            self.results.append(area_stats(pred, label, num_classes,
                                           self.ignore_index).cpu().numpy())

    def compute_metrics(self, results):
        totals = np.sum(results, axis=0)
        per_class = class_metrics(totals, self.beta)
        if self.nan_to_num is not None:
            per_class = {k: np.nan_to_num(v, nan=self.nan_to_num) for k, v in per_class.items()}
        inter, _, _, area_label = totals
        metrics = OrderedDict(aAcc=100 * inter.sum() / max(area_label.sum(), 1))
        columns = []
        for name in self.iou_metrics:
            columns += [c for c in _COLUMNS[name] if c not in columns]
        for column in columns:
            metrics['m' + column] = 100 * self._nanmean(per_class[column])
        print_log('\n' + self.table(per_class, columns), logger='current')
        return {k: round(float(v), 2) for k, v in metrics.items()}

    @staticmethod
    def _nanmean(values):
        return float(np.nanmean(values)) if np.isfinite(values).any() else float('nan')

    def table(self, per_class, columns):
        """Fixed-width per-class table (percent; 'nan' where undefined)."""
        names = [str(c) for c in self.dataset_meta['classes']]
        width = max(len(n) for n in names + ['Class'])
        lines = [f"{'Class':<{width}}  " + '  '.join(f'{c:>9}' for c in columns)]
        for i, name in enumerate(names):
            lines.append(f'{name:<{width}}  ' + '  '.join(
                f'{100 * per_class[c][i]:>9.2f}' for c in columns))
        return '\n'.join(lines)
