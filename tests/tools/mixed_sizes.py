"""A validation split of generated shapes whose images differ in size, for the batching tests.

The generated data sets (``densevit/datasets/shapes.py``, ``shapes_seg.py``) give every image
one size; here image ``i`` has ``sizes[i % len(sizes)]``, so every batch of two or more
images is padded. Same layout as the generated splits: segmentation
``images/validation`` + ``annotations/validation`` (class maps), detection ``val/`` +
``annotations/instances_val.json`` (COCO).
"""
import json
from pathlib import Path

import cv2
import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.evaluator import Evaluator
from mmengine.model import BaseModel
from mmengine.registry import DefaultScope

from densevit.datasets.shapes import CATEGORIES, mask_to_xywh, render_image
from densevit.registry import DATASETS

#: (H, W) of the images, each twice in a batch of 8; the tiny models' test pipelines fit them
#: into 48 x 48 keeping the ratio (48x48, 30x48, 48x30, 48x41): still 4 sizes
SIZES = [(48, 48), (40, 64), (64, 40), (56, 48)]
#: render_image options for them (tiny_*_shapes.py's, whole shapes)
SHAPES = dict(max_objects=2, min_size=10, max_size=24, inside=True)
N = 8
#: batch 8 against batch 1, largest per-image difference allowed (measured: 6e-8 on logits,
#: 1e-8 on scores, 4e-6 pixels on boxes; 0.005-0.06 / 0.004 / 0.05-49 before grouping)
TOL = dict(logits=1e-4, scores=1e-5, boxes=1e-3)


def write_mixed_shapes(root, kind, sizes, num_images, seed=1, **shapes):
    """Render ``num_images`` images of the ``sizes`` (H, W) in turn under ``root``;
    ``kind`` 'seg' or 'det'; ``shapes``: :func:`render_image`'s options. Returns ``root``."""
    root = Path(root)
    img_dir = root / ('images/validation' if kind == 'seg' else 'val')
    ann_dir = root / ('annotations/validation' if kind == 'seg' else 'annotations')
    img_dir.mkdir(parents=True, exist_ok=True)
    ann_dir.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for idx in range(num_images):
        h, w = sizes[idx % len(sizes)]
        out = render_image(np.random.default_rng([seed, idx]), (h, w), **shapes)
        name = f'{idx:06d}.png'
        cv2.imwrite(str(img_dir / name), out['img'])
        if kind == 'seg':
            cv2.imwrite(str(ann_dir / name), out['class_map'])
            continue
        images.append(dict(id=idx + 1, file_name=name, width=w, height=h))
        for s in out['shapes']:
            annotations.append(dict(id=len(annotations) + 1, image_id=idx + 1, iscrowd=0,
                                    category_id=s['category_id'], bbox=mask_to_xywh(s['mask']),
                                    area=int(s['mask'].sum())))
    if kind == 'det':
        (ann_dir / 'instances_val.json').write_text(json.dumps(
            dict(images=images, annotations=annotations, categories=CATEGORIES)))
    return root


def mixed_config(base, kind, data_root, path):
    """A config file ``path`` inheriting ``base`` (of ``kind`` 'seg' / 'det') whose
    validation and test split is the one :func:`write_mixed_shapes` wrote under ``data_root``."""
    data_root = Path(data_root).as_posix().rstrip('/') + '/'
    ann = data_root + 'annotations/instances_val.json'
    det = (f"ann_file={ann!r}, data_prefix=dict(img='val/'), " if kind == 'det' else '')
    text = f"""
_base_ = [{str(base)!r}]
val_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(
    data_root={data_root!r}, {det}generate=None))
test_dataloader = val_dataloader
""" + (f'val_evaluator = dict(ann_file={ann!r})\ntest_evaluator = val_evaluator\n'
       if kind == 'det' else '')
    Path(path).write_text(text)
    return str(path)


def load_split(config):
    """(config, dataset) of the test split of ``config`` (a file or a Config)."""
    cfg = config if isinstance(config, Config) else Config.fromfile(config)
    with DefaultScope.overwrite_default_scope('densevit'):
        return cfg, DATASETS.build(cfg.test_dataloader.dataset)


def predict(test_step, dataset, batch_size):
    """Every image of ``dataset`` through ``test_step`` in batches of ``batch_size``, in
    order (each call gets fresh samples: prediction writes into its DataSamples)."""
    out = []
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            items = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
            out += test_step(pseudo_collate(items))
    return out


def evaluate(cfg, dataset, outputs):
    """The config's test metric over ``outputs`` (what a Runner's TestLoop computes)."""
    with DefaultScope.overwrite_default_scope('densevit'):
        evaluator = Evaluator(cfg.test_evaluator)
        evaluator.dataset_meta = dataset.metainfo
        evaluator.process(outputs)
        return evaluator.evaluate(len(outputs))


def differences(ref, got):
    """Largest per-image differences between two lists of predicted DataSamples of the same
    images: seg_logits (and the number of differing pixels of pred_sem_seg), or detection
    scores and box corners (pixels) and the number of differing labels."""
    assert [r.img_path for r in ref] == [g.img_path for g in got]
    if 'seg_logits' in ref[0]:
        return dict(
            logits=max((r.seg_logits.data - g.seg_logits.data).abs().max().item()
                       for r, g in zip(ref, got, strict=True)),
            pixels=sum(int((r.pred_sem_seg.data != g.pred_sem_seg.data).sum())
                       for r, g in zip(ref, got, strict=True)))
    pairs = [(r.pred_instances, g.pred_instances) for r, g in zip(ref, got, strict=True)]
    return dict(scores=max((r.scores - g.scores).abs().max().item() for r, g in pairs),
                boxes=max((r.bboxes - g.bboxes).abs().max().item() for r, g in pairs),
                labels=sum(int((r.labels != g.labels).sum()) for r, g in pairs))


def mixed(tmp_path_factory, kind, base):
    """A config inheriting ``base`` whose test split is N images of the SIZES in turn,
    written once per session."""
    root = Path(tmp_path_factory.getbasetemp()) / f'mixed_sizes_{kind}'
    if not root.exists():
        write_mixed_shapes(root, kind, SIZES, N, **SHAPES)
    return mixed_config(base, kind, root, root.parent / f'mixed_{Path(base).stem}.py')


def batch1_and_batch8(model, config):
    """(predictions at batch 1, at batch 8, cfg, dataset) on ``config``'s test split. The
    batch-1 reference is mmengine's own ``BaseModel.test_step`` (not the grouping code)."""
    cfg, dataset = load_split(config)
    assert len({tuple(dataset[i]['inputs'].shape) for i in range(N)}) >= 3  # after the pipeline
    ref = predict(lambda data: BaseModel.test_step(model, data), dataset, 1)
    return ref, predict(model.test_step, dataset, 8), cfg, dataset


def assert_same(ref, got):
    """Per-image predictions equal within TOL, the same classes / labels."""
    diff = differences(ref, got)
    assert all(diff[k] <= TOL[k] for k in diff if k in TOL), diff
    assert diff.get('pixels', 0) == 0 and diff.get('labels', 0) == 0, diff
