"""COCO box and mask AP with pycocotools, as an mmengine metric.

Label ``i`` is ``dataset_meta['cat_ids'][i]`` when the dataset gives it (CocoDataset
does, also when ``metainfo.classes`` keeps a subset), else the ``i``-th category id
of the annotation file in ascending id order (COCO ids have gaps). Mapping by id,
not by name: ``getCatIds(catNms=...)`` returns the file's order, not the order of
the names asked for.
"""
import contextlib
import copy
import io
import json
import os.path as osp

import numpy as np
from mmengine.evaluator import BaseMetric
from mmengine.fileio import dump, get_local_path
from mmengine.logging import print_log
from pycocotools import mask as mask_util
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from densevit.datasets.coco import (
    clip_coco_box,
    id_problems,
    renumber_annotations,
    repeated_ann_ids,
)
from densevit.datasets.transforms.loading import DataError
from densevit.registry import METRICS

# what each metric scores, and the key of its shape in a COCO result
IOU_TYPES = {'bbox': 'bbox', 'segm': 'segmentation'}
# Index in COCOeval.stats of each returned metric (maxDets [1, 10, 100]).
_STATS = {'mAP': 0, 'mAP_50': 1, 'mAP_75': 2, 'mAP_s': 3, 'mAP_m': 4, 'mAP_l': 5}


def _numpy(x):
    """Tensor or array-like -> numpy array (on CPU)."""
    if hasattr(x, 'detach'):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _get(obj, key, default=None):
    """Field of a DataSample / InstanceData or key of its ``to_dict()`` form."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default) if key in obj else default


def label_cat_ids(meta_ids, file_ids, ann_file):
    """Category id of each label: ``dataset_meta['cat_ids']`` when the dataset gives
    them (each must be a category of ``ann_file``), else ``file_ids`` (the file's
    categories in the dataset's label order)."""
    if meta_ids is None:
        return list(file_ids)
    unknown = [c for c in meta_ids if c not in file_ids]
    if unknown:
        raise ValueError(f"dataset_meta['cat_ids'] {unknown} are not categories of "
                         f'ann_file {ann_file} (ids {list(file_ids)})')
    return list(meta_ids)


def encode_masks(masks):
    """Boolean masks ``[N, H, W]`` -> COCO RLEs (``counts`` as str, JSON-ready)."""
    masks = _numpy(masks)
    if masks.dtype.kind == 'f' and masks.size:
        raise TypeError('pred_instances.masks must be boolean (threshold soft masks first), '
                        f'got {masks.dtype}')
    rles = []
    for mask in masks.astype(np.uint8):  # one mask at a time: no [H, W, N] copy
        rle = mask_util.encode(np.asfortranarray(mask))
        rle['counts'] = rle['counts'].decode('ascii')
        rles.append(rle)
    return rles


def load_coco_gt(ann_file, drop_degenerate=False):
    """COCO ground truth with the fields COCOeval needs filled on a copy.

    COCOeval reads ``iscrowd`` and ``area`` of every annotation; files made by
    hand or by converters often omit them (``area`` then defaults to the box area).
    ``drop_degenerate``: leave out the boxes CocoDataset drops (zero or negative
    width or height once clipped to the image, :func:`clip_coco_box`); they are
    listed in the returned COCO's ``dropped_anns``.

    Repeated annotation ids are numbered 1..N in file order, as CocoDataset's
    ``renumber_ann_ids=True`` does (pycocotools would keep one box per id, and score
    against other boxes than training uses), with a line in the log; repeated image
    ids raise DataError, as in CocoDataset.
    """
    with get_local_path(ann_file) as path, open(path) as f:
        dataset = json.load(f)
    problems = id_problems(dict(images=dataset.get('images', [])), ann_file, ann_ids=False)
    if problems:
        raise DataError(problems[0])
    repeated = repeated_ann_ids(dataset.get('annotations', []))
    if repeated:
        renumber_annotations(dataset['annotations'])
        print_log(f'CocoMetric: {len(repeated)} annotation ids repeat in {ann_file}; its '
                  f'{len(dataset["annotations"])} annotations are numbered 1..N in file order, '
                  'as CocoDataset(renumber_ann_ids=True) does, so every box is scored',
                  logger='current')
    sizes = {img['id']: (img.get('width'), img.get('height'))
             for img in dataset.get('images', [])}
    kept, dropped = [], []
    for ann in dataset.get('annotations', []):
        ann.setdefault('iscrowd', 0)
        if 'area' not in ann and 'bbox' in ann:
            ann['area'] = float(ann['bbox'][2] * ann['bbox'][3])
        w, h = sizes.get(ann.get('image_id'), (None, None))
        degenerate = (drop_degenerate and 'bbox' in ann and w is not None and h is not None
                      and clip_coco_box(ann['bbox'], w, h) is None)
        (dropped if degenerate else kept).append(ann)
    if 'annotations' in dataset:
        dataset['annotations'] = kept
    coco = COCO()
    coco.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):  # "creating index..." chatter
        coco.createIndex()
    coco.dropped_anns = dropped
    return coco


@METRICS.register_module()
class CocoMetric(BaseMetric):
    """COCO box and mask mAP (``bbox_mAP``, ``bbox_mAP_50``, ``_75``, ``_s``, ``_m``,
    ``_l``; ``segm_mAP`` ... for masks), MMDetection's names, in 0-1.

    Args:
        ann_file (str, optional): COCO instances JSON. Required to evaluate; with
            ``format_only`` and no file, labels map to ``dataset_meta['cat_ids']``
            if the dataset gives them, else to ``label + 1``.
        metric (str | list[str]): ``'bbox'``, ``'segm'`` or both. ``'segm'`` scores
            ``pred_instances.masks`` (boolean ``[N, H, W]`` at the original image size,
            RLE-encoded by pycocotools) with ``COCOeval(iouType='segm')`` against the
            file's ``segmentation`` (polygons or RLE); mask results carry no box, so
            COCOeval takes each detection's area from its mask, as MMDetection does.
        classwise (bool): also log a per-class AP table.
        format_only (bool): only write ``<outfile_prefix>.bbox.json`` (and
            ``.segm.json``); return ``{}``.
        outfile_prefix (str, optional): where results are written (also when
            evaluating).
        collect_device, prefix: see ``mmengine.evaluator.BaseMetric``.

    The ground truth is the file's boxes less those CocoDataset drops (zero or
    negative width or height once clipped to the image: nothing can match them);
    each evaluation logs how many boxes it counts. Boxes that only extend past
    the image are scored as the file writes them, as pycocotools does. Repeated
    annotation ids are numbered 1..N in file order (CocoDataset's
    ``renumber_ann_ids=True``), repeated image ids refused (:func:`load_coco_gt`).

    With no predictions at all, COCOeval is run on an empty result set (loadRes
    refuses empty lists), so the numbers are COCOeval's own: 0.0 where ground
    truth exists, -1.0 where an area range has none.
    """

    default_prefix = 'coco'

    def __init__(self, ann_file=None, metric='bbox', classwise=False, format_only=False,
                 outfile_prefix=None, collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        metrics = [metric] if isinstance(metric, str) else list(metric)
        if not metrics or not set(metrics) <= set(IOU_TYPES) or len(set(metrics)) < len(metrics):
            raise KeyError(f"CocoMetric's metric is 'bbox', 'segm' or both, got {metric!r}")
        self.metrics = [m for m in IOU_TYPES if m in metrics]
        if format_only and outfile_prefix is None:
            raise ValueError('format_only=True needs outfile_prefix (where to write results)')
        if not format_only and ann_file is None:
            raise ValueError('CocoMetric needs ann_file to evaluate (or format_only=True)')
        self.ann_file = ann_file
        self.classwise = classwise
        self.format_only = format_only
        self.outfile_prefix = outfile_prefix
        self.coco_gt = (load_coco_gt(ann_file, drop_degenerate=True)
                        if ann_file is not None else None)

    def _cat_ids(self):
        """Category id of each label (None: ``label + 1``); also the categories evaluated."""
        meta = self.dataset_meta or {}
        meta_ids = meta.get('cat_ids')
        if meta_ids is not None and meta.get('thing_classes') is not None:
            # panoptic data (things first): the instances, and an instances file, are things
            meta_ids = list(meta_ids)[:len(meta['thing_classes'])]
        if self.coco_gt is not None:
            return label_cat_ids(meta_ids, sorted(self.coco_gt.getCatIds()), self.ann_file)
        if meta_ids is not None:
            return list(meta_ids)
        num_classes = len((self.dataset_meta or {}).get('classes', ())) or None
        print_log('CocoMetric: no ann_file nor dataset_meta["cat_ids"]; writing '
                  'category_id = label + 1', logger='current')
        return None if num_classes is None else list(range(1, num_classes + 1))

    def process(self, data_batch, data_samples):
        """Keep ``img_id`` and the predicted boxes / scores / labels as numpy (and the
        masks as RLEs, with their size, for ``'segm'``)."""
        for sample in data_samples:
            pred = _get(sample, 'pred_instances')
            if pred is None:
                raise KeyError('CocoMetric needs pred_instances in every data sample')
            res = dict(
                img_id=int(_get(sample, 'img_id')),
                bboxes=_numpy(_get(pred, 'bboxes', np.zeros((0, 4)))).reshape(-1, 4),
                scores=_numpy(_get(pred, 'scores', np.zeros(0))).reshape(-1),
                labels=_numpy(_get(pred, 'labels', np.zeros(0))).reshape(-1).astype(np.int64))
            if 'segm' in self.metrics:
                masks = _get(pred, 'masks')
                if masks is None:
                    raise KeyError("CocoMetric(metric='segm') needs pred_instances.masks in "
                                   'every data sample')
                res['mask_size'] = tuple(masks.shape[-2:])
                res['masks'] = encode_masks(masks)
            self.results.append(res)

    def results_to_coco(self, results, cat_ids, iou_type='bbox'):
        """Per-image results -> COCO results list (xywh box or RLE mask, score,
        category_id)."""
        dets = []
        for res in results:
            if len(res['labels']) and cat_ids is not None and res['labels'].max() >= len(cat_ids):
                raise ValueError(f"label {res['labels'].max()} of image {res['img_id']} has no "
                                 f'category: {len(cat_ids)} categories')
            if iou_type == 'segm':
                shapes = res['masks']
            else:
                boxes = res['bboxes'].astype(np.float64)
                shapes = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]],
                                        axis=1).tolist()
            key = IOU_TYPES[iou_type]
            for shape, score, label in zip(shapes, res['scores'].tolist(),
                                           res['labels'].tolist(), strict=True):
                cat = cat_ids[label] if cat_ids is not None else label + 1
                dets.append({'image_id': res['img_id'], key: shape, 'score': float(score),
                             'category_id': int(cat)})
        return dets

    def _check_mask_sizes(self, results):
        for res in results:
            if 'mask_size' not in res or not len(res['masks']):
                continue
            img = self.coco_gt.imgs[res['img_id']]
            if res['mask_size'] != (img.get('height'), img.get('width')):
                raise DataError(f"masks of image {res['img_id']} ({img.get('file_name')}) are "
                                f"{res['mask_size'][0]}x{res['mask_size'][1]} but the image is "
                                f"{img.get('height')}x{img.get('width')} in {self.ann_file}: "
                                'masks must be at the original image size')

    def compute_metrics(self, results):
        # Distributed samplers pad the dataset by repeating images: keep the first.
        unique = {}
        for res in results:
            unique.setdefault(res['img_id'], res)
        results = list(unique.values())
        cat_ids = self._cat_ids()
        dets = {iou_type: self.results_to_coco(results, cat_ids, iou_type)
                for iou_type in self.metrics}

        if self.outfile_prefix is not None:
            for iou_type, type_dets in dets.items():
                out_file = f'{self.outfile_prefix}.{iou_type}.json'
                dump(type_dets, out_file)
                print_log(f'CocoMetric: results written to {osp.abspath(out_file)}',
                          logger='current')
        if self.format_only:
            return {}

        gt_img_ids = set(self.coco_gt.getImgIds())
        for img_id in unique:
            if img_id not in gt_img_ids:
                raise ValueError(f'CocoMetric: image id {img_id} is not in ann_file '
                                 f'{self.ann_file}; is the metric given the same annotation '
                                 'file as the dataset?')
        print_log(self.ground_truth_line(unique, cat_ids), logger='current')
        self._check_mask_sizes(results)
        metrics = {}
        for iou_type, type_dets in dets.items():
            coco_eval = self._evaluate(type_dets, sorted(unique), sorted(cat_ids), iou_type)
            metrics.update({f'{iou_type}_{name}': float(coco_eval.stats[i])
                            for name, i in _STATS.items()})
            if self.classwise:
                print_log(f'\n{iou_type}:\n' + self.classwise_table(coco_eval),
                          logger='current')
        return metrics

    def ground_truth_line(self, img_ids, cat_ids):
        """What the evaluation counts as ground truth, in one line: the boxes of the
        images and categories scored, less those CocoDataset drops."""
        img_ids, cat_ids = set(img_ids), set(cat_ids)

        def scored(anns):
            return sum(a['image_id'] in img_ids and a['category_id'] in cat_ids for a in anns)
        kept = scored(self.coco_gt.dataset['annotations'])
        dropped = scored(self.coco_gt.dropped_anns)
        line = (f'CocoMetric: evaluating {kept} boxes of {kept + dropped} in {self.ann_file} '
                f'({len(img_ids)} images)')
        if dropped:
            line += (f': {dropped} with zero or negative width/height (after clipping to '
                     'the image) dropped, as the dataset drops them in training')
        return line

    def _evaluate(self, dets, img_ids, cat_ids, iou_type='bbox'):
        """Run COCOeval on the given images and categories; its summary goes to the log."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if dets:
                coco_dt = self.coco_gt.loadRes(copy.deepcopy(dets))  # loadRes mutates dicts
            else:  # loadRes indexes anns[0]: build the empty result set by hand
                coco_dt = COCO()
                coco_dt.dataset = dict(images=list(self.coco_gt.dataset['images']),
                                       categories=copy.deepcopy(self.coco_gt.dataset['categories']),
                                       annotations=[])
                coco_dt.createIndex()
            coco_eval = COCOeval(self.coco_gt, coco_dt, iou_type)
            # Only the images seen, so evaluating a subset of the dataset is fair.
            coco_eval.params.imgIds = img_ids
            coco_eval.params.catIds = cat_ids  # a class subset is scored on its own classes
            coco_eval.params.maxDets = [1, 10, 100]
            coco_eval.evaluate()
            coco_eval.accumulate()
            coco_eval.summarize()
        summary = out.getvalue()
        summary = summary[summary.find(' Average Precision'):] if 'Average' in summary else summary
        print_log(f'\n{iou_type}:\n' + summary, logger='current')
        return coco_eval

    def classwise_table(self, coco_eval):
        """Fixed-width table of per-class AP, AP50, AP75 (area all, maxDets 100)."""
        precision = coco_eval.eval['precision']  # [T iou, R recall, K class, A area, M maxDets]
        iou_thrs = coco_eval.params.iouThrs
        names = {c['id']: c['name'] for c in self.coco_gt.dataset['categories']}
        rows = []
        for k, cat_id in enumerate(coco_eval.params.catIds):
            aps = []
            for t in (slice(None), np.isclose(iou_thrs, 0.5), np.isclose(iou_thrs, 0.75)):
                p = precision[t, :, k, 0, -1]
                p = p[p > -1]
                aps.append(f'{p.mean():.3f}' if p.size else 'nan')
            rows.append([str(names.get(cat_id, cat_id))] + aps)
        header = ['category', 'AP', 'AP50', 'AP75']
        width = max(len(r[0]) for r in rows + [header])
        lines = [f'{r[0]:<{width}}  ' + '  '.join(f'{v:>6}' for v in r[1:])
                 for r in [header] + rows]
        return '\n'.join(lines)
