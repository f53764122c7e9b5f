"""Repeated ids in a COCO file (user study of bad input, items 4 and 5).

- Annotation ids numbered from 1 within each image: pycocotools keeps one box per id,
  so a perfect predictor scored ~0.2 mAP while training used every box. CocoDataset
  refuses the file naming the ids; ``renumber_ann_ids=True`` numbers them 1..N and
  CocoMetric then scores the boxes training uses (pycocotools on a file the test
  renumbers itself is the reference).
- Two images with one id: one file vanished and its boxes moved to the other. The
  dataset and the metric refuse the file naming the id and both files.
"""
import contextlib
import copy
import io
import json
import re

import pytest
import torch
from mmengine.structures import InstanceData
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from densevit.datasets.coco import CocoDataset
from densevit.datasets.transforms.loading import DataError
from densevit.evaluation.coco_metric import CocoMetric
from densevit.structures import DataSample

# (image id, category id, [x, y, w, h]); ids restart at 1 in every image
BOXES = [(1, 1, [10, 10, 30, 20]), (1, 2, [50, 40, 20, 30]), (1, 1, [5, 50, 20, 20]),
         (2, 2, [5, 5, 40, 40]), (2, 1, [60, 10, 30, 30]), (2, 2, [20, 50, 25, 25]),
         (3, 1, [20, 30, 25, 25]), (3, 2, [70, 5, 20, 40])]


def per_image_ids(tmp_path, images=None):
    """A COCO file whose annotation ids repeat (1, 2, 3 in every image)."""
    ids = [sum(b[0] == img for b in BOXES[:k]) + 1 for k, (img, _, _) in enumerate(BOXES)]
    data = dict(
        images=images or [dict(id=i, file_name=f'{i}.png', width=100, height=80)
                          for i in (1, 2, 3)],
        categories=[dict(id=1, name='a'), dict(id=2, name='b')],
        annotations=[dict(id=i, image_id=img, category_id=cat, bbox=box, area=box[2] * box[3],
                          iscrowd=0) for i, (img, cat, box) in zip(ids, BOXES, strict=True)])
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data))
    return path, data


def perfect_detections():
    """Every box of BOXES, score 1, in COCO's result format."""
    return [dict(image_id=img, category_id=cat, bbox=box, score=1.0) for img, cat, box in BOXES]


def pycocotools_map(data):
    """pycocotools alone: perfect detections scored against ``data``."""
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = copy.deepcopy(data)
        gt.createIndex()
        coco_eval = COCOeval(gt, gt.loadRes(perfect_detections()), 'bbox')
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval.stats[0]


def test_repeated_annotation_ids_are_refused_naming_them_and_the_file(tmp_path):
    """The original failure (pycocotools on the file scores a perfect predictor < 1), then
    the dataset's refusal: one line naming the file, the ids and the option."""
    ann_file, data = per_image_ids(tmp_path)
    assert pycocotools_map(data) < 0.5
    with pytest.raises(DataError) as e:
        CocoDataset(ann_file=str(ann_file))
    msg = str(e.value)
    assert '\n' not in msg
    assert msg.startswith(f'{ann_file}: annotation ids used by more than one annotation: '
                          'id 1 (3 times), id 2 (3 times), id 3 (2 times); ')
    assert msg.endswith('set renumber_ann_ids=True on the dataset to number them 1..N in file '
                        'order')


def test_renumbered_ids_score_a_perfect_predictor_as_pycocotools_does(tmp_path, log_lines):
    """renumber_ann_ids=True keeps all 8 boxes, and CocoMetric scores perfect predictions
    1.0: the same as pycocotools on the file with ids 1..8 written by the test."""
    ann_file, data = per_image_ids(tmp_path)
    dataset = CocoDataset(ann_file=str(ann_file), renumber_ann_ids=True, test_mode=True)
    assert sum(len(dataset.get_data_info(i)['instances']) for i in range(len(dataset))) == 8
    unique = copy.deepcopy(data)
    for k, ann in enumerate(unique['annotations']):
        ann['id'] = 100 + k
    reference = pycocotools_map(unique)
    assert reference == 1.0

    metric = CocoMetric(ann_file=str(ann_file))
    metric.dataset_meta = dataset.metainfo
    samples = []
    for img in (1, 2, 3):
        mine = [(cat, box) for i, cat, box in BOXES if i == img]
        pred = InstanceData(
            bboxes=torch.tensor([[x, y, x + w, y + h] for _, (x, y, w, h) in mine]),
            scores=torch.ones(len(mine)),
            labels=torch.tensor([dataset.cat2label[cat] for cat, _ in mine]))
        samples.append(DataSample(metainfo=dict(img_id=img), pred_instances=pred))
    metric.process({}, samples)
    assert metric.evaluate(len(samples))['coco/bbox_mAP'] == reference
    lines = [text for _, text in log_lines]
    assert f'CocoMetric: evaluating 8 boxes of 8 in {ann_file} (3 images)' in lines
    assert any('3 annotation ids repeat' in line and 'numbered 1..N' in line for line in lines)


def test_repeated_image_ids_are_refused_naming_both_files(tmp_path):
    """Image id 2 given to two files: the dataset and the metric both refuse, naming both."""
    images = [dict(id=1, file_name='1.png', width=100, height=80),
              dict(id=2, file_name='left.png', width=100, height=80),
              dict(id=2, file_name='right.png', width=100, height=80),
              dict(id=3, file_name='3.png', width=100, height=80)]
    ann_file, _ = per_image_ids(tmp_path, images)
    expected = (f'{ann_file}: image ids used by more than one image: id 2 (left.png, '
                'right.png); annotations find their image by id')
    for build in (lambda: CocoDataset(ann_file=str(ann_file), renumber_ann_ids=True),
                  lambda: CocoMetric(ann_file=str(ann_file))):
        with pytest.raises(DataError, match='^' + re.escape(expected)):
            build()
    with pytest.raises(DataError) as e:  # both problems of the file in one line
        CocoDataset(ann_file=str(ann_file))
    assert expected in str(e.value) and 'annotation ids' in str(e.value)
    assert '\n' not in str(e.value)
