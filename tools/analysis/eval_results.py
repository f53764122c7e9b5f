"""Score saved predictions without a model.

Detection: a COCO results JSON (``[{image_id, category_id, bbox: xywh, score}]``, as
``CocoMetric(outfile_prefix=...)`` writes it) against an annotation file::

    python tools/analysis/eval_results.py coco RESULTS.bbox.json ANN_FILE [--classwise]

Segmentation: a folder of predicted label PNGs (one class index per pixel, named
like the annotation files) against a folder of annotations in the ADE20K layout::

    python tools/analysis/eval_results.py seg PRED_DIR GT_DIR (--num-classes K | --classes A B ...)
        [--reduce-zero-label] [--ignore-index 255]

``--json FILE`` (before the task) also writes the metrics, with the command, commit and
machine (``densevit.utils.provenance``).

The numbers are the metrics' own (CocoMetric's COCOeval call, IoUMetric's summed
areas): identical to what ``tools/test.py`` logs for the same predictions. COCO
scores every image of the annotation file (as ``tools/test.py`` over the whole
set does); an image with no detections counts as missed.
"""
import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np
import torch

from densevit.datasets.transforms.seg_loading import reduce_zero_label as reduce_zero_label_map
from densevit.evaluation.coco_metric import _STATS, CocoMetric
from densevit.evaluation.iou_metric import IoUMetric, area_stats
from densevit.utils.provenance import add_json_argument, write_result


def eval_coco(results_file, ann_file, classwise=False):
    """COCO bbox metrics (keys ``bbox_mAP``...) of a results JSON."""
    metric = CocoMetric(ann_file=ann_file, classwise=classwise)
    with open(results_file) as f:
        dets = json.load(f)
    img_ids = sorted(metric.coco_gt.getImgIds())
    unknown = sorted({d['image_id'] for d in dets} - set(img_ids))
    if unknown:
        raise ValueError(f'{results_file}: image ids {unknown[:10]} are not in {ann_file}')
    coco_eval = metric._evaluate(dets, img_ids, sorted(metric.coco_gt.getCatIds()))
    if classwise:
        print(metric.classwise_table(coco_eval))
    return {f'bbox_{name}': float(coco_eval.stats[i]) for name, i in _STATS.items()}


def read_label(path):
    label = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if label is None:
        raise ValueError(f'cannot read label map: {path}')
    return label if label.ndim == 2 else label[..., 0]


def eval_seg(pred_dir, gt_dir, classes, reduce_zero_label=False, ignore_index=255,
             suffix='.png'):
    """IoUMetric's numbers (``aAcc``, ``mIoU``, ``mAcc``) for PNG predictions."""
    gt_files = sorted(Path(gt_dir).glob(f'*{suffix}'))
    if not gt_files:
        raise FileNotFoundError(f'no *{suffix} annotations in {gt_dir}')
    missing = [p.name for p in gt_files if not (Path(pred_dir) / p.name).is_file()]
    if missing:
        raise FileNotFoundError(f'{len(missing)} of {len(gt_files)} annotations have no '
                                f'prediction in {pred_dir}, e.g. {missing[:5]}')
    metric = IoUMetric(ignore_index=ignore_index)
    metric.dataset_meta = dict(classes=tuple(classes))
    areas = []
    for gt_path in gt_files:
        label = read_label(gt_path)
        # ADE20K: 0 is "other" -> ignored, classes shift down by one (LoadSegAnnotations' rule)
        label = (reduce_zero_label_map(label) if reduce_zero_label else label).astype(np.int64)
        pred = read_label(Path(pred_dir) / gt_path.name).astype(np.int64)
        if pred.shape != label.shape:
            raise ValueError(f'{gt_path.name}: prediction {pred.shape} and annotation '
                             f'{label.shape} differ in size')
        areas.append(area_stats(torch.from_numpy(pred), torch.from_numpy(label), len(classes),
                                ignore_index).numpy())
    return metric.compute_metrics(areas)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Score saved predictions')
    sub = p.add_subparsers(dest='task', required=True)
    c = sub.add_parser('coco', help='COCO results JSON vs annotation file')
    c.add_argument('results')
    c.add_argument('ann_file')
    c.add_argument('--classwise', action='store_true')
    s = sub.add_parser('seg', help='folder of predicted PNGs vs folder of annotation PNGs')
    s.add_argument('pred_dir')
    s.add_argument('gt_dir')
    group = s.add_mutually_exclusive_group(required=True)
    group.add_argument('--num-classes', type=int)
    group.add_argument('--classes', nargs='+')
    s.add_argument('--reduce-zero-label', action='store_true')
    s.add_argument('--ignore-index', type=int, default=255)
    add_json_argument(p, 'the metrics')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.task == 'coco':
        metrics = eval_coco(args.results, args.ann_file, args.classwise)
    else:
        classes = args.classes or [str(i) for i in range(args.num_classes)]
        metrics = eval_seg(args.pred_dir, args.gt_dir, classes, args.reduce_zero_label,
                           args.ignore_index)
    print(json.dumps(metrics))
    if args.json:
        inputs = ({'results': args.results, 'ann_file': args.ann_file} if args.task == 'coco'
                  else {'pred_dir': args.pred_dir, 'gt_dir': args.gt_dir})
        write_result(args.json, metrics, task=args.task, inputs=inputs)
    return 0


if __name__ == '__main__':
    sys.exit(main())
