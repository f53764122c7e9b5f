"""tools/analysis/eval_results.py scores saved predictions exactly as the metrics do:
a COCO results JSON (CocoMetric's own output file) and a folder of label PNGs."""
import json

import cv2
import numpy as np
import pytest
import torch
from mmengine.structures import InstanceData, PixelData

from densevit.datasets.shapes import generate_shapes
from densevit.datasets.shapes_seg import CLASSES, generate_shapes_seg
from densevit.datasets.transforms.seg_loading import reduce_zero_label
from densevit.evaluation.coco_metric import CocoMetric
from densevit.evaluation.iou_metric import IoUMetric
from densevit.structures import DataSample

from tiny_run import load_tool


@pytest.fixture(scope='module')
def tool():
    return load_tool('tools/analysis/eval_results.py')


def noisy_detections(ann, rng):
    """Per image: its boxes jittered (some dropped, some relabelled) plus a false positive."""
    samples = []
    for img in ann['images']:
        boxes = [a for a in ann['annotations'] if a['image_id'] == img['id']]
        dets = []
        for a in boxes:
            if rng.random() < 0.2:
                continue
            x, y, w, h = np.array(a['bbox']) + rng.normal(0, 2, 4)
            label = a['category_id'] - 1 if rng.random() < 0.8 else rng.integers(3)
            dets.append(([x, y, x + w, y + h], rng.random(), label))
        dets.append(([0, 0, 10, 10], 0.05, 0))
        samples.append(DataSample(img_id=img['id'], pred_instances=InstanceData(
            bboxes=torch.tensor([d[0] for d in dets], dtype=torch.float32),
            scores=torch.tensor([d[1] for d in dets], dtype=torch.float32),
            labels=torch.tensor([d[2] for d in dets]))))
    return samples


def test_coco_results_json_scores_as_coco_metric(tool, tmp_path):
    generate_shapes(str(tmp_path), 'val', num_images=12, img_size=(64, 64), seed=3)
    ann_file = tmp_path / 'annotations' / 'instances_val.json'
    ann = json.loads(ann_file.read_text())
    metric = CocoMetric(ann_file=str(ann_file), outfile_prefix=str(tmp_path / 'res'))
    metric.dataset_meta = dict(classes=('circle', 'rectangle', 'triangle'))
    metric.process({}, noisy_detections(ann, np.random.default_rng(0)))
    expected = metric.evaluate(len(ann['images']))
    assert 0.1 < expected['coco/bbox_mAP'] < 0.95

    out = tmp_path / 'metrics.json'
    assert tool.main(['--json', str(out), 'coco', str(tmp_path / 'res.bbox.json'),
                      str(ann_file)]) == 0
    got = json.loads(out.read_text())
    assert {f'coco/{k}': v for k, v in got['results'].items()} == expected
    assert got['task'] == 'coco' and got['inputs']['ann_file'] == str(ann_file)
    assert {'command', 'commit', 'cpu_model', 'torch_threads'} <= set(got['provenance'])


@pytest.mark.parametrize('reduce', [False, True])
def test_label_pngs_score_as_iou_metric(tool, tmp_path, reduce):
    _, gt_dir = generate_shapes_seg(str(tmp_path), 'validation', num_images=6,
                                    img_size=(40, 48), seed=2)
    rng = np.random.default_rng(1)
    pred_dir = tmp_path / 'pred'
    pred_dir.mkdir()
    num_classes = len(CLASSES) - 1 if reduce else len(CLASSES)
    metric = IoUMetric()
    metric.dataset_meta = dict(classes=CLASSES[1:] if reduce else CLASSES)
    for path in sorted(tmp_path.glob('annotations/validation/*.png')):
        label = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        label = reduce_zero_label(label) if reduce else label.astype(np.int32)
        pred = np.where(rng.random(label.shape) < 0.8, label, rng.integers(0, num_classes,
                                                                            label.shape))
        pred = np.where(pred == 255, 0, pred).astype(np.uint8)
        cv2.imwrite(str(pred_dir / path.name), pred)
        metric.process({}, [dict(pred_sem_seg=PixelData(data=torch.from_numpy(pred)[None]),
                                 gt_sem_seg=PixelData(data=torch.from_numpy(label)[None]))])
    expected = metric.evaluate(6)
    assert 20 < expected['mIoU'] < 100

    out = tmp_path / 'metrics.json'
    args = ['--json', str(out), 'seg', str(pred_dir), gt_dir, '--num-classes', str(num_classes)]
    assert tool.main(args + (['--reduce-zero-label'] if reduce else [])) == 0
    got = json.loads(out.read_text())
    assert got['results'] == expected
    assert got['task'] == 'seg' and got['inputs'] == dict(pred_dir=str(pred_dir), gt_dir=gt_dir)
    assert {'command', 'commit', 'cpu_model', 'torch_threads'} <= set(got['provenance'])


def test_seg_reports_missing_predictions(tool, tmp_path):
    _, gt_dir = generate_shapes_seg(str(tmp_path), 'validation', num_images=2, img_size=(32, 32))
    (tmp_path / 'pred').mkdir()
    with pytest.raises(FileNotFoundError, match='2 of 2 annotations have no prediction'):
        tool.main(['seg', str(tmp_path / 'pred'), gt_dir, '--num-classes', '4'])
