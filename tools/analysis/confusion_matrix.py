"""The confusion matrix of a segmentation model's class maps, from the predictions that
``tools/test.py --out`` saved (MMSegmentation's ``confusion_matrix.py`` workflow)::

    python tools/test.py CONFIG CHECKPOINT --out results.pkl
    python tools/analysis/confusion_matrix.py CONFIG results.pkl --out confusion.png [--json FILE]

Rows are the labelled classes, columns the predicted ones. The picture shows each row as the
share of that class's labelled pixels (pixels labelled ``--ignore-index`` left out) and the
class's IoU beside it; ``--json`` keeps the pixel counts too. Any model whose data samples
carry ``pred_sem_seg`` works (SETR, SegFormer, the semantic output of EoMT and Mask2Former)
on a dataset that gives ``gt_sem_seg``. The class names are the test dataset's
(``metainfo.classes`` in the config, else its dataset class's own).
"""
import argparse
import sys
from pathlib import Path

import mmengine
import numpy as np
import torch
from mmengine.config import Config

from densevit.apis.inference import _dataset_meta
from densevit.evaluation.iou_metric import class_metrics, confusion_counts
from densevit.utils.provenance import add_json_argument, write_result


def dataset_classes(cfg):
    """The test dataset's class names, found as ``init_model`` finds them (its config's
    ``metainfo``, else the dataset class's ``METAINFO``)."""
    classes = (_dataset_meta(cfg, None) or {}).get('classes')
    if not classes:
        raise ValueError('the config names no classes: give them in '
                         'test_dataloader.dataset.metainfo.classes')
    return tuple(classes)


def class_map(sample, key):
    """``sample[key]['data']`` (the [1, H, W] map :class:`mmengine.evaluator.DumpResults`
    saves) as [H, W], None when the sample has no such map."""
    field = sample.get(key)
    if field is None or 'data' not in field:
        return None
    return torch.as_tensor(field['data']).squeeze(0)


def confusion(samples, num_classes, ignore_index=255, source='the predictions'):
    """Summed :func:`~densevit.evaluation.iou_metric.confusion_counts` of the saved samples:
    int64 [K, K] (rows labels, columns predictions). ``source`` names them in errors."""
    total = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for i, sample in enumerate(samples):
        pred, label = class_map(sample, 'pred_sem_seg'), class_map(sample, 'gt_sem_seg')
        name = sample.get('img_path', f'sample {i}')
        if pred is None or label is None:
            missing = [k for k, v in (('pred_sem_seg', pred), ('gt_sem_seg', label)) if v is None]
            raise ValueError(f'{source}: {name} has no {" or ".join(missing)}: the confusion '
                             "matrix needs a model's class map and the dataset's labels")
        if pred.shape != label.shape:
            raise ValueError(f'{source}: {name}: prediction {tuple(pred.shape)} and label '
                             f'{tuple(label.shape)} differ in size')
        try:
            total += confusion_counts(pred, label, num_classes, ignore_index)
        except ValueError as e:
            raise ValueError(f'{source}: {name}: {e} (the config has {num_classes} classes)') \
                from None
    return total


def row_shares(counts):
    """Each row over its sum (a class's labelled pixels), 0 for a class never labelled."""
    counts = np.asarray(counts, dtype=np.float64)
    rows = counts.sum(1, keepdims=True)
    return np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)


def class_iou(counts):
    """Per-class IoU (0-100) from the matrix, by ``IoUMetric``'s own rule
    (:func:`~densevit.evaluation.iou_metric.class_metrics` of its diagonal, union and areas);
    NaN where the class is neither labelled nor predicted."""
    counts = np.asarray(counts, dtype=np.int64)
    inter, area_pred, area_label = np.diag(counts), counts.sum(0), counts.sum(1)
    totals = np.stack([inter, area_pred + area_label - inter, area_pred, area_label])
    return 100 * class_metrics(totals)['IoU']


def draw(counts, classes, out, title=None):
    """The row shares as a heat map with the numbers written in, each class's IoU in its row
    name; saved to ``out``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    shares, iou = row_shares(counts), class_iou(counts)
    k = len(classes)
    size = max(4.0, 0.6 * k + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(100 * shares, cmap='Blues', vmin=0, vmax=100)
    for r in range(k):
        for c in range(k):
            if k <= 30:
                ax.text(c, r, f'{100 * shares[r, c]:.0f}', ha='center', va='center', fontsize=8,
                        color='white' if shares[r, c] > 0.5 else 'black')
    ax.set_xticks(range(k), classes, rotation=45, ha='right')
    ax.set_yticks(range(k), [f'{n} (IoU {v:.1f})' for n, v in zip(classes, iou, strict=True)])
    ax.set_xlabel('predicted class')
    ax.set_ylabel('labelled class')
    ax.set_title(title or "share of each labelled class's pixels (%)")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config', help='the config the predictions were made with (class names)')
    p.add_argument('predictions', help='the .pkl file of tools/test.py --out')
    p.add_argument('--out', help='PNG to write')
    p.add_argument('--ignore-index', type=int, default=255)
    p.add_argument('--title', help='title of the picture')
    add_json_argument(p, 'the counts, the row shares and the IoUs')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    for path in (args.config, args.predictions):
        if not Path(path).is_file():
            print(f'confusion_matrix.py: no such file: {path}', file=sys.stderr)
            return 2
    try:
        classes = dataset_classes(Config.fromfile(args.config))
        samples = mmengine.load(args.predictions)
        if not isinstance(samples, list) or not samples:
            raise ValueError(f'{args.predictions}: expected the list of samples that '
                             'tools/test.py --out writes')
        counts = confusion(samples, len(classes), args.ignore_index, args.predictions)
    except ValueError as e:
        print(f'confusion_matrix.py: {e}', file=sys.stderr)
        return 2
    shares, iou = row_shares(counts), class_iou(counts)
    width = max(len(c) for c in classes)
    print(f'{"":>{width}}  ' + ' '.join(f'{c[:8]:>8}' for c in classes) + '       IoU')
    for name, row, value in zip(classes, shares, iou, strict=True):
        print(f'{name:>{width}}  ' + ' '.join(f'{100 * v:8.1f}' for v in row) + f'  {value:8.1f}')
    if args.out:
        draw(counts, classes, args.out, args.title)
        print(f'written: {args.out}')
    if args.json:
        write_result(args.json, dict(classes=list(classes), counts=counts.tolist(),
                                     row_shares=shares.tolist(), iou=iou.tolist(),
                                     num_images=len(samples)),
                     config=args.config, predictions=args.predictions)
        print(f'written: {args.json}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
