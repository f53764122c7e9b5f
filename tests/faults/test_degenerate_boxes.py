"""Degenerate boxes: the dataset and the COCO metric count the same boxes.

A box with zero or negative width or height (after clipping to its image) is
dropped by CocoDataset; CocoMetric leaves it out of the ground truth too, so
perfect predictions of the kept boxes score AP 1.0 (pycocotools on the kept boxes is
the reference), and the log says how many boxes evaluation counts.
"""
import contextlib
import io
import json

import numpy as np
import torch
from mmengine.structures import InstanceData
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from densevit.datasets.coco import CocoDataset
from densevit.evaluation.coco_metric import CocoMetric
from densevit.structures import DataSample


def tiny_coco(tmp_path):
    """3 images, 6 boxes: 4 good ones, one of zero width, one wholly left of its image."""
    boxes = [(1, [10, 10, 30, 20]), (1, [50, 40, 20, 30]), (2, [5, 5, 40, 40]),
             (3, [20, 30, 25, 25]), (2, [60, 10, 0, 15]), (3, [-40, 10, 30, 20])]
    data = dict(
        images=[dict(id=i, file_name=f'{i}.png', width=100, height=80) for i in (1, 2, 3)],
        categories=[dict(id=1, name='a'), dict(id=2, name='b')],
        annotations=[dict(id=k + 1, image_id=img, category_id=1 + k % 2, bbox=b,
                          area=b[2] * b[3], iscrowd=0) for k, (img, b) in enumerate(boxes)])
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data))
    return path


def perfect_predictions(dataset):
    samples = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        boxes = [inst['bbox'] for inst in info['instances']]
        pred = InstanceData(bboxes=torch.tensor(boxes).reshape(-1, 4),
                            scores=torch.ones(len(boxes)),
                            labels=torch.tensor([inst['bbox_label'] for inst in info['instances']],
                                                dtype=torch.int64))
        samples.append(DataSample(metainfo=dict(img_id=info['img_id']), pred_instances=pred))
    return samples


def reference_ap(ann_file, kept_ids, samples):
    """pycocotools called directly, on the annotation file less the dropped boxes."""
    data = json.loads(ann_file.read_text())
    data['annotations'] = [a for a in data['annotations'] if a['id'] in kept_ids]
    dets = [dict(image_id=s.img_id, category_id=int(label) + 1, score=1.0,
                 bbox=[x1, y1, x2 - x1, y2 - y1])
            for s in samples for (x1, y1, x2, y2), label in
            zip(s.pred_instances.bboxes.tolist(), s.pred_instances.labels, strict=True)]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = data
        gt.createIndex()
        coco_eval = COCOeval(gt, gt.loadRes(dets), 'bbox')
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval.stats[0]


def test_degenerate_boxes_are_dropped_by_dataset_and_metric_alike(tmp_path, log_lines):
    ann_file = tiny_coco(tmp_path)
    dataset = CocoDataset(ann_file=str(ann_file), test_mode=True, lazy_init=False)
    assert any('dropped 2 boxes with zero or negative width/height' in text
               for _, text in log_lines)
    assert sum(len(dataset.get_data_info(i)['instances']) for i in range(len(dataset))) == 4
    samples = perfect_predictions(dataset)
    metric = CocoMetric(ann_file=str(ann_file))
    metric.dataset_meta = dataset.metainfo
    metric.process({}, samples)
    ap = metric.evaluate(len(samples))['coco/bbox_mAP']
    assert ap == 1.0
    np.testing.assert_allclose(ap, reference_ap(ann_file, {1, 2, 3, 4}, samples))
    assert (f'CocoMetric: evaluating 4 boxes of 6 in {ann_file} (3 images): 2 with zero or '
            'negative width/height (after clipping to the image) dropped, as the dataset drops '
            'them in training') in [text for _, text in log_lines]
