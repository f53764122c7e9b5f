"""CocoMetric against pycocotools' COCOeval called directly: equal to the last digit."""
import contextlib
import copy
import io
import json

import numpy as np
import pytest
import torch
from mmengine.structures import InstanceData
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from densevit.evaluation.coco_metric import CocoMetric
from densevit.registry import METRICS
from densevit.structures import DataSample

CAT_IDS = [9, 1, 5]  # file order on purpose: labels follow ascending ids 1, 5, 9
KEYS = ['bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l']


def make_gt():
    """6 images: small / medium / large boxes, crowd boxes, 2 images without boxes."""
    rng = np.random.default_rng(0)
    images = [dict(id=i, file_name=f'{i}.jpg', width=320, height=240) for i in (3, 7, 11, 12, 20, 42)]
    anns = []
    for img_id in (3, 7, 11, 12):
        for side in (12, 20, 40, 70, 120):  # areas on both sides of 32² and 96²
            x, y = rng.uniform(0, 320 - side), rng.uniform(0, 240 - side)
            anns.append(dict(image_id=img_id, bbox=[x, y, side, side * 0.9],
                             category_id=int(rng.choice(CAT_IDS)),
                             area=side * side * 0.9, iscrowd=0))
    anns.append(dict(image_id=3, bbox=[10, 10, 200, 150], category_id=1, area=30000., iscrowd=1))
    anns.append(dict(image_id=11, bbox=[50, 50, 100, 100], category_id=5, area=10000., iscrowd=1))
    for i, ann in enumerate(anns):
        ann['id'] = i + 1
    cats = [dict(id=c, name=f'cat{c}') for c in CAT_IDS]
    return dict(images=images, annotations=anns, categories=cats)


def make_preds(gt):
    """Seeded predictions: jittered ground truth (some mislabelled) and random boxes.

    Image 12 has ground truth and no predictions; images 20 and 42 have none.
    """
    rng = np.random.default_rng(1)
    cat_to_label = {c: i for i, c in enumerate(sorted(CAT_IDS))}
    preds = {}
    for img in gt['images']:
        img_id, boxes, labels = img['id'], [], []
        if img_id != 12:
            for ann in gt['annotations']:
                if ann['image_id'] == img_id and not ann['iscrowd']:
                    x, y, w, h = ann['bbox']
                    jitter = rng.normal(0, 0.08, 4) * [w, h, w, h]
                    boxes.append([x, y, x + w, y + h] + jitter)
                    label = cat_to_label[ann['category_id']]
                    labels.append(label if rng.random() > 0.2 else int(rng.integers(3)))
            for _ in range(int(rng.integers(1, 6))):
                x1, y1 = rng.uniform(0, 280), rng.uniform(0, 200)
                boxes.append([x1, y1, x1 + rng.uniform(4, 120), y1 + rng.uniform(4, 120)])
                labels.append(int(rng.integers(3)))
        n = len(boxes)
        preds[img_id] = dict(bboxes=torch.tensor(np.array(boxes).reshape(n, 4), dtype=torch.float32),
                             scores=torch.tensor(rng.random(n), dtype=torch.float32),
                             labels=torch.tensor(labels, dtype=torch.long).reshape(n))
    return preds


def samples(preds):
    out = []
    for img_id, pred in preds.items():
        s = DataSample(metainfo=dict(img_id=img_id))
        s.pred_instances = InstanceData(**pred)
        out.append(s)
    return out


def reference_stats(ann_file, preds, cat_ids=None):
    """What a user would get from pycocotools directly (label i -> cat_ids[i])."""
    ids = cat_ids or sorted(CAT_IDS)
    dets = []
    for img_id, p in preds.items():
        b = p['bboxes'].numpy().astype(np.float64)
        for box, s, label in zip(b.tolist(), p['scores'].numpy().tolist(),
                                 p['labels'].tolist(), strict=True):
            if label >= len(ids):
                continue
            dets.append(dict(image_id=img_id, category_id=ids[label], score=s,
                             bbox=[box[0], box[1], box[2] - box[0], box[3] - box[1]]))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(ann_file)
        ev = COCOeval(gt, gt.loadRes(dets), 'bbox')
        ev.params.maxDets = [1, 10, 100]
        if cat_ids:
            ev.params.catIds = cat_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return dict(zip(KEYS, ev.stats[:6].tolist(), strict=True))


@pytest.fixture
def coco(tmp_path):
    gt = make_gt()
    ann_file = tmp_path / 'gt.json'
    ann_file.write_text(json.dumps(gt))
    return str(ann_file), gt, make_preds(gt)


def run(metric, data_samples):
    metric.process({}, data_samples)
    return metric.compute_metrics(metric.results)


def test_matches_cocoeval(coco):
    ann_file, _, preds = coco
    got = run(CocoMetric(ann_file=ann_file, classwise=True), samples(preds))
    want = reference_stats(ann_file, preds)
    assert set(got) == set(KEYS)
    assert got == want  # exact, not approximate
    assert 0 < got['bbox_mAP'] < 1 and min(got.values()) > 0  # every area range exercised


def test_registry_prefix_and_dict_inputs(coco):
    ann_file, _, preds = coco
    metric = METRICS.build(dict(type='CocoMetric', ann_file=ann_file))
    metric.process({}, [s.to_dict() for s in samples(preds)])  # what mmengine's Evaluator passes
    got = metric.evaluate(len(preds))
    want = reference_stats(ann_file, preds)
    assert got == {f'coco/{k}': v for k, v in want.items()}


def first_two_labels(preds):
    """The predictions of labels 0 and 1 only."""
    return {img_id: {k: v[p['labels'] < 2] for k, v in p.items()} for img_id, p in preds.items()}


def test_dataset_class_subset(coco):
    """CocoDataset(metainfo=dict(classes=...)) keeps a subset: labels index its cat_ids."""
    ann_file, _, preds = coco
    subset = first_two_labels(preds)
    metric = CocoMetric(ann_file=ann_file)
    metric.dataset_meta = dict(classes=('cat1', 'cat9'), cat_ids=(1, 9))
    assert run(metric, samples(subset)) == reference_stats(ann_file, subset, cat_ids=[1, 9])
    metric = CocoMetric(ann_file=ann_file)
    metric.dataset_meta = dict(classes=('x',), cat_ids=(4,))
    with pytest.raises(ValueError, match='4'):
        run(metric, samples(subset))


def test_panoptic_dataset_meta_evaluates_its_things(coco):
    """A panoptic dataset's meta lists things then stuff (cat_ids of both); its instances
    file holds the things: labels 0..T-1 are the things' ids, the stuff ids are not asked
    of the file (they were refused as unknown categories)."""
    ann_file, _, preds = coco
    subset = first_two_labels(preds)
    metric = CocoMetric(ann_file=ann_file)
    metric.dataset_meta = dict(classes=('cat1', 'cat9', 'sky', 'grass'), cat_ids=(1, 9, 91, 92),
                               thing_classes=('cat1', 'cat9'), stuff_classes=('sky', 'grass'))
    assert run(metric, samples(subset)) == reference_stats(ann_file, subset, cat_ids=[1, 9])


def test_duplicates_are_dropped(coco):
    ann_file, _, preds = coco
    data = samples(preds)
    once = run(CocoMetric(ann_file=ann_file), data)
    twice = run(CocoMetric(ann_file=ann_file), data + data[:3])  # a padded sampler
    assert once == twice


def test_numpy_inputs(coco):
    ann_file, _, preds = coco
    dicts = [dict(img_id=i, pred_instances={k: v.numpy() for k, v in p.items()})
             for i, p in preds.items()]
    assert run(CocoMetric(ann_file=ann_file), dicts) == reference_stats(ann_file, preds)


def test_empty_predictions(coco):
    ann_file, _, preds = coco
    empty = {i: dict(bboxes=torch.zeros(0, 4), scores=torch.zeros(0),
                     labels=torch.zeros(0, dtype=torch.long)) for i in preds}
    got = run(CocoMetric(ann_file=ann_file), samples(empty))
    assert got == dict.fromkeys(KEYS, 0.0)  # every area range has ground truth
    assert set(run(CocoMetric(ann_file=ann_file), []).values()) <= {0.0, -1.0}


def test_missing_iscrowd_and_area(coco, tmp_path):
    ann_file, gt, preds = coco
    stripped = copy.deepcopy(gt)
    stripped['annotations'] = [a for a in stripped['annotations'] if not a['iscrowd']]
    for a in stripped['annotations']:
        del a['iscrowd']
    explicit = copy.deepcopy(stripped)
    for a in explicit['annotations']:
        a['iscrowd'] = 0
    (tmp_path / 'stripped.json').write_text(json.dumps(stripped))
    (tmp_path / 'explicit.json').write_text(json.dumps(explicit))
    got = run(CocoMetric(ann_file=str(tmp_path / 'stripped.json')), samples(preds))
    assert got == reference_stats(str(tmp_path / 'explicit.json'), preds)


def test_format_only_writes_results(coco, tmp_path):
    ann_file, _, preds = coco
    prefix = str(tmp_path / 'out' / 'results')
    metric = CocoMetric(ann_file=ann_file, format_only=True, outfile_prefix=prefix)
    assert run(metric, samples(preds)) == {}
    dets = json.loads((tmp_path / 'out' / 'results.bbox.json').read_text())
    assert len(dets) == sum(len(p['labels']) for p in preds.values())
    assert {d['category_id'] for d in dets} <= set(CAT_IDS)
    first = preds[3]
    label, box = int(first['labels'][0]), first['bboxes'][0].double().tolist()
    assert dets[0]['category_id'] == sorted(CAT_IDS)[label]
    assert dets[0]['bbox'] == pytest.approx([box[0], box[1], box[2] - box[0], box[3] - box[1]])


def test_unknown_image_id(coco):
    ann_file, _, preds = coco
    data = samples(preds)
    data[0].set_metainfo(dict(img_id=999))
    with pytest.raises(ValueError, match='999.*gt.json'):
        run(CocoMetric(ann_file=ann_file), data)
