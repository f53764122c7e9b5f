"""COCO panoptic quality (PQ, SQ, RQ) as an mmengine metric.

Predictions follow MMDetection 3.x: each data sample's ``pred_panoptic_seg.sem_seg``
``[1, H, W]`` at the original image size holds ``label + instance * INSTANCE_OFFSET``,
``label == num_classes`` for void (``densevit/structures/panoptic.py``); each distinct
value is one segment. The ground truth is read from COCO panoptic files (``ann_file``
JSON + ``seg_prefix`` PNG folder, as MMDetection's ``CocoPanopticMetric``), or, without
``ann_file``, from each data sample: ``gt_panoptic_seg`` in the same encoding
(``LoadPanopticAnnotations``: a thing class's crowd region has instance 0), else the PNG
at ``seg_map_path`` with ``segments_info`` (the dataset's per-image list of ``id``,
``category`` (the label) and ``iscrowd``; MMDetection's ``is_thing`` False on a thing
class also marks crowd). The rule is :mod:`densevit.evaluation.panoptic_quality`'s.
"""
import os
import os.path as osp

import numpy as np
from mmengine.evaluator import BaseMetric
from mmengine.fileio import dump
from mmengine.logging import print_log
from PIL import Image

from densevit.datasets.coco_panoptic import load_panoptic_json, panoptic_label_order
from densevit.datasets.transforms.loading import DataError
from densevit.datasets.transforms.panoptic_loading import read_panoptic_png
from densevit.evaluation.coco_metric import _get, _numpy, label_cat_ids
from densevit.evaluation.panoptic_quality import (
    class_table,
    pq_metrics,
    pq_results,
    pq_stats,
    summary_table,
)
from densevit.registry import METRICS
from densevit.structures.panoptic import INSTANCE_OFFSET, id_to_rgb


def read_gt_png(path, shape, img_id):
    """Segment ids ``[H, W]`` of a ground-truth PNG; refused naming the file when it is
    missing, not RGB, or of another size than the prediction (``shape``)."""
    ids = read_panoptic_png(path)
    if ids.shape != tuple(shape):
        raise DataError(f'panoptic ground truth {path} (image {img_id}) is {ids.shape[0]}x'
                        f'{ids.shape[1]} but the prediction is {shape[0]}x{shape[1]}: '
                        'predictions must be at the original image size')
    return ids


def decode_panoptic(pan, num_classes, what):
    """A map ``[H, W]`` of ``label + instance * INSTANCE_OFFSET`` (``label ==
    num_classes``: void) -> its segments numbered 1..N in ascending value (0: void) and
    ``{segment id: value}``; a value of no class is refused, naming ``what``."""
    values, inverse = np.unique(pan, return_inverse=True)
    labels = values % INSTANCE_OFFSET
    bad = (values < 0) | (labels > num_classes)
    if bad.any():
        raise ValueError(f'{what} has ids {values[bad].tolist()[:10]} of no category: ids are '
                         f'label + instance * {INSTANCE_OFFSET} with labels 0..'
                         f'{num_classes - 1} ({num_classes} = void)')
    void = labels == num_classes
    new_ids = np.where(void, 0, np.cumsum(~void))
    segments = dict(zip(new_ids[~void].tolist(), values[~void].tolist(), strict=True))
    return new_ids[inverse].reshape(pan.shape), segments


def segment_boxes(ids, count):
    """``[count, 4]`` xywh boxes of segments 1..count of an id map (one pass per axis)."""
    boxes = np.zeros((count, 4), dtype=np.int64)
    for axis, (lo, size) in enumerate(((0, 2), (1, 3))):
        coords = np.arange(ids.shape[1 - axis])
        seen = np.zeros((count + 1, len(coords)), dtype=bool)
        seen[ids, coords[None, :] if axis == 0 else coords[:, None]] = True
        seen = seen[1:]
        has = seen.any(1)
        first = np.argmax(seen, axis=1)
        last = len(coords) - 1 - np.argmax(seen[:, ::-1], axis=1)
        boxes[:, lo] = np.where(has, first, 0)
        boxes[:, size] = np.where(has, last - first + 1, 0)
    return boxes


@METRICS.register_module()
class CocoPanopticMetric(BaseMetric):
    """PQ / SQ / RQ (percent) of all classes, things and stuff: keys ``PQ``, ``SQ``,
    ``RQ``, ``PQ_th``, ``SQ_th``, ``RQ_th``, ``PQ_st``, ``SQ_st``, ``RQ_st`` (prefix
    ``coco_panoptic/``), MMDetection's names.

    Args:
        ann_file (str, optional): COCO panoptic JSON (``images``, ``annotations`` with
            ``image_id``, ``file_name``, ``segments_info``; ``categories`` with ``isthing``).
        seg_prefix (str, optional): the folder of its PNGs; given with ``ann_file``.
        classwise (bool): log the per-class table (thing / stuff, PQ / SQ / RQ) above
            the all / things / stuff rows; False: those rows only.
        format_only (bool): only write the predictions (needs ``outfile_prefix``);
            return ``{}``.
        outfile_prefix (str, optional): write the predictions in COCO panoptic format,
            ``<prefix>.panoptic.json`` and one PNG per image in ``<prefix>.panoptic/``
            (named as the ground-truth PNG), so another evaluator can score them.
        collect_device, prefix: see ``mmengine.evaluator.BaseMetric``.

    Labels map to categories through ``dataset_meta['cat_ids']`` when the dataset gives
    them (a subset: other categories' ground truth counts as void), else in
    ``CocoPanopticDataset``'s order (things by ascending id, then stuff). Without
    ``ann_file``, the classes are ``dataset_meta['classes']`` and things those in
    ``dataset_meta['thing_classes']``.
    Ground-truth areas are counted on the PNG (panopticapi reads the JSON's ``area``:
    the same for a consistent file). Pixels on crowd segments of a prediction's class
    are summed over every such segment (COCO files have one per class and image).
    Each image is reduced to a ``[K, 4]`` array when processed, so distributed
    evaluation gathers only those; images repeated by a padding sampler count once.
    """

    default_prefix = 'coco_panoptic'

    def __init__(self, ann_file=None, seg_prefix=None, classwise=True, format_only=False,
                 outfile_prefix=None, collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        if (ann_file is None) != (seg_prefix is None):
            raise ValueError('CocoPanopticMetric needs ann_file and seg_prefix together '
                             '(the panoptic JSON and its PNG folder), or neither (the ground '
                             'truth from each data sample)')
        if format_only and outfile_prefix is None:
            raise ValueError('format_only=True needs outfile_prefix (where to write results)')
        self.ann_file = ann_file
        self.seg_prefix = seg_prefix
        self.classwise = classwise
        self.format_only = format_only
        self.outfile_prefix = outfile_prefix
        self._gt = self._file_categories = None
        if ann_file is not None:
            data, self._gt = load_panoptic_json(ann_file)
            self._file_categories = panoptic_label_order(data['categories'])

    # categories -----------------------------------------------------------------
    def categories(self):
        """Per label: dict(id=category id, name, isthing), from ``dataset_meta`` and the
        file."""
        meta = self.dataset_meta or {}
        if self._file_categories is not None:
            by_id = {c['id']: c for c in self._file_categories}
            ids = label_cat_ids(meta.get('cat_ids'), list(by_id), self.ann_file)
            cats = [dict(id=c, name=by_id[c]['name'], isthing=int(bool(by_id[c]['isthing'])))
                    for c in ids]
        else:
            classes, things = meta.get('classes'), meta.get('thing_classes')
            if not classes or things is None:
                raise ValueError("CocoPanopticMetric without ann_file needs dataset_meta "
                                 "'classes' and 'thing_classes' (set by the runner from the "
                                 'dataset) to tell things from stuff')
            ids = meta.get('cat_ids') or [i + 1 for i in range(len(classes))]
            cats = [dict(id=int(c), name=str(n), isthing=int(n in things))
                    for c, n in zip(ids, classes, strict=True)]
        return cats

    # ground truth -----------------------------------------------------------------
    def _gt_from_files(self, img_id, shape):
        ann = self._gt.get(img_id)
        if ann is None:
            raise DataError(f'CocoPanopticMetric: image id {img_id} has no annotation in '
                            f'ann_file {self.ann_file}; is the metric given the same file as '
                            'the dataset?')
        path = osp.join(self.seg_prefix, ann['file_name'])
        ids = read_gt_png(path, shape, img_id)
        label_of = {c['id']: i for i, c in enumerate(self.categories())}
        segments, dropped = {}, []
        for seg in ann['segments_info']:  # categories checked by load_panoptic_json
            if seg['category_id'] in label_of:
                segments[seg['id']] = (label_of[seg['category_id']], seg.get('iscrowd', 0))
            else:  # a class subset: the other categories are void
                dropped.append(seg['id'])
        if dropped:
            ids = np.where(np.isin(ids, dropped), 0, ids)
        return ids, segments, ann['file_name']

    def _gt_from_sample(self, sample, shape):
        """``gt_panoptic_seg`` (MMDetection's encoding: crowd regions of a thing class
        have instance 0), else the PNG at ``seg_map_path`` with ``segments_info``."""
        img_id = _get(sample, 'img_id')
        cats = self.categories()
        gt = _get(sample, 'gt_panoptic_seg')
        path = _get(sample, 'seg_map_path')
        name = osp.basename(path) if path else f'{int(img_id):012d}.png'
        if gt is not None:
            pan = _numpy(_get(gt, 'data', _get(gt, 'sem_seg'))).astype(np.int64)
            pan = pan.reshape(pan.shape[-2:])
            if pan.shape != tuple(shape):
                raise DataError(f'gt_panoptic_seg of image {img_id} is {pan.shape[0]}x'
                                f'{pan.shape[1]} but the prediction is {shape[0]}x{shape[1]}')
            ids, values = decode_panoptic(pan, len(cats), f'gt_panoptic_seg of image {img_id}')
            segments = {}
            for i, v in values.items():
                label = v % INSTANCE_OFFSET
                segments[i] = (label, int(bool(cats[label]['isthing']) and v < INSTANCE_OFFSET))
            return ids, segments, name
        info = _get(sample, 'segments_info')
        if info is None or path is None:
            raise KeyError('CocoPanopticMetric without ann_file needs gt_panoptic_seg, or '
                           'seg_map_path and segments_info, in each data sample (or give '
                           'ann_file and seg_prefix)')
        ids = read_gt_png(path, shape, img_id)
        segments = {}
        for seg in info:
            label = int(seg['category'])
            if 'iscrowd' in seg:
                crowd = seg['iscrowd']
            else:  # MMDetection marks a crowd thing segment with is_thing=False
                crowd = cats[label]['isthing'] and not seg.get('is_thing', True)
            segments[int(seg['id'])] = (label, int(bool(crowd)))
        return ids, segments, name

    # predictions -------------------------------------------------------------------
    def _prediction(self, sample, num_classes):
        """Predicted id map renumbered 1..N (0 = void) and the label of each segment."""
        pred = _get(sample, 'pred_panoptic_seg')
        if pred is None:
            raise KeyError('CocoPanopticMetric needs pred_panoptic_seg in every data sample')
        pan = _numpy(_get(pred, 'sem_seg', _get(pred, 'data'))).astype(np.int64)
        ids, values = decode_panoptic(pan.reshape(pan.shape[-2:]), num_classes,
                                      f'pred_panoptic_seg of image {_get(sample, "img_id")}')
        return ids, {i: v % INSTANCE_OFFSET for i, v in values.items()}

    def _write_png(self, file_name, ids, segments):
        out_dir = f'{self.outfile_prefix}.panoptic'
        os.makedirs(out_dir, exist_ok=True)
        Image.fromarray(id_to_rgb(ids)).save(osp.join(out_dir, file_name))
        cats = self.categories()
        areas = np.bincount(ids.ravel(), minlength=len(segments) + 1)
        boxes = segment_boxes(ids, len(segments))
        return [dict(id=i, category_id=cats[label]['id'], iscrowd=0,
                     isthing=cats[label]['isthing'], area=int(areas[i]),
                     bbox=boxes[i - 1].tolist())
                for i, label in segments.items()]

    def process(self, data_batch, data_samples):
        """Score each image (a ``[K, 4]`` array) and write its PNG when asked to."""
        num_classes = len(self.categories())
        for sample in data_samples:
            img_id = int(_get(sample, 'img_id'))
            pred_ids, pred_segments = self._prediction(sample, num_classes)
            result = dict(img_id=img_id, stats=None, segments_info=None)
            if self.format_only:
                name = (self._gt[img_id]['file_name'] if self._gt and img_id in self._gt
                        else f'{img_id:012d}.png')
            else:
                if self._gt is not None:
                    gt_ids, gt_segments, name = self._gt_from_files(img_id, pred_ids.shape)
                else:
                    gt_ids, gt_segments, name = self._gt_from_sample(sample, pred_ids.shape)
                try:
                    result['stats'] = pq_stats(gt_ids, gt_segments, pred_ids, pred_segments,
                                               num_classes)
                except ValueError as e:  # name the image and its ground-truth file
                    raise DataError(f'{name} (image {img_id}): {e}') from e
            if self.outfile_prefix is not None:
                name = osp.splitext(name)[0] + '.png'
                result['file_name'] = name
                result['segments_info'] = self._write_png(name, pred_ids, pred_segments)
            self.results.append(result)

    def compute_metrics(self, results):
        unique = {}
        for res in results:  # a padding sampler repeats images: keep the first
            unique.setdefault(res['img_id'], res)
        cats = self.categories()
        if self.outfile_prefix is not None:
            out_file = f'{self.outfile_prefix}.panoptic.json'
            dump(dict(annotations=[dict(image_id=i, file_name=r['file_name'],
                                        segments_info=r['segments_info'])
                                   for i, r in unique.items()],
                      categories=cats), out_file)
            print_log(f'CocoPanopticMetric: predictions written to {osp.abspath(out_file)} '
                      f'and {osp.abspath(self.outfile_prefix)}.panoptic/', logger='current')
        if self.format_only:
            return {}
        stats = (np.sum([r['stats'] for r in unique.values()], axis=0) if unique
                 else np.zeros((len(cats), 4)))
        isthing = [bool(c['isthing']) for c in cats]
        results = pq_results(stats, isthing)
        metrics = pq_metrics(results)
        table = (class_table(results, [c['name'] for c in cats], isthing) if self.classwise
                 else summary_table(metrics))
        print_log(f'CocoPanopticMetric: {len(unique)} images\n{table}', logger='current')
        return metrics
