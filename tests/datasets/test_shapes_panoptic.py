"""The shapes generator's instance masks and its panoptic version: masks consistent with
boxes, the panoptic PNGs with the instances, determinism, generation on first use, the CLI."""
import json
import runpy
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope
from pycocotools import mask as mask_utils

from densevit.datasets.shapes import generate_shapes
from densevit.datasets.shapes_panoptic import (
    CATEGORIES,
    ShapesPanopticDataset,
    generate_shapes_panoptic,
)
from densevit.registry import DATASETS
from densevit.structures.panoptic import rgb_to_id

REPO = Path(__file__).parents[2]
SIZE = (48, 64)


def load(path):
    return json.loads(Path(path).read_text())


def box_of(mask):
    ys, xs = np.nonzero(mask)
    return [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()]


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob('*'))
            if p.is_file()}


def test_detection_masks_agree_with_boxes_and_never_overlap(tmp_path):
    data = load(generate_shapes(tmp_path, 'train', 12, SIZE, seed=2, max_objects=5))
    by_image = {}
    for a in data['annotations']:
        mask = mask_utils.decode(a['segmentation']).astype(bool)
        assert mask.shape == SIZE and mask.sum() == a['area']
        # the box is the mask's pixel extent, exactly (the issue allows 1 px)
        assert np.abs(np.subtract(box_of(mask), a['bbox'])).max() <= 0
        union = by_image.setdefault(a['image_id'], np.zeros(SIZE, bool))
        assert not (union & mask).any()
        union |= mask


@pytest.fixture(scope='module')
def panoptic_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('shapes_panoptic')
    generate_shapes_panoptic(root, 'train', 16, SIZE, seed=0, max_objects=5)
    return root


def test_panoptic_png_agrees_with_json_and_instances(panoptic_root):
    root = panoptic_root
    pan = load(root / 'annotations' / 'panoptic_train.json')
    inst = load(root / 'annotations' / 'instances_train.json')
    assert pan['categories'] == CATEGORIES
    assert [c['isthing'] for c in pan['categories']] == [1, 1, 1, 0, 0, 0]
    assert pan['images'] == inst['images']
    for ann in pan['annotations']:
        png = cv2.imread(str(root / 'annotations' / 'panoptic_train' / ann['file_name']))
        ids = rgb_to_id(png[..., ::-1])
        assert ids.shape == SIZE and (ids > 0).all()  # every pixel is a segment
        segments = {s['id']: s for s in ann['segments_info']}
        assert set(np.unique(ids).tolist()) == set(segments)
        stuff = [s for s in segments.values() if s['category_id'] > 3]
        assert 1 <= len(stuff) <= 3 and len({s['category_id'] for s in stuff}) == len(stuff)
        for seg_id, s in segments.items():
            assert s['area'] == (ids == seg_id).sum() and s['bbox'] == box_of(ids == seg_id)
        # the things are exactly the instances of the image: same masks, same classes
        things = sorted((s['category_id'], (ids == i).tobytes()) for i, s in segments.items()
                        if s['category_id'] <= 3)
        instances = sorted((a['category_id'], mask_utils.decode(a['segmentation']).astype(bool)
                            .tobytes()) for a in inst['annotations']
                           if a['image_id'] == ann['image_id'])
        assert things == instances and things


def test_same_seed_same_bytes(tmp_path, panoptic_root):
    generate_shapes_panoptic(tmp_path / 'a', 'train', 16, SIZE, seed=0, max_objects=5)
    assert files(tmp_path / 'a') == files(panoptic_root)
    generate_shapes_panoptic(tmp_path / 'b', 'train', 2, SIZE, seed=1, max_objects=5)
    assert files(tmp_path / 'b')['train/000000.png'] != files(panoptic_root)['train/000000.png']


def build(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return DATASETS.build(cfg)


def test_base_config_generates_on_first_use_and_samples_carry_all_targets(tmp_path):
    cfg = Config.fromfile(REPO / 'configs' / '_base_' / 'datasets' / 'shapes_panoptic.py')
    samples = {}
    for split in ('train', 'val'):
        dataset = dict(cfg[f'{split}_dataloader']['dataset'], data_root=str(tmp_path) + '/')
        dataset['generate'] = dict(dataset['generate'], num_images=3)
        ds = build(dataset)
        assert isinstance(ds, ShapesPanopticDataset) and len(ds) == 3
        samples[split] = ds[0]['data_samples']
        assert (tmp_path / 'annotations' / f'panoptic_{split}.json').is_file()
    for sample in samples.values():
        assert sample.gt_panoptic_seg.data.shape == (1, 128, 128)
        assert sample.gt_sem_seg.data.max() <= 5 and sample.gt_panoptic_seg.ignore_index == 6
        assert len(sample.gt_instances.masks) == len(sample.gt_instances.labels) > 0
    # a second build finds the data; other arguments are refused
    assert len(build(dict(cfg.val_dataloader.dataset, data_root=str(tmp_path) + '/',
                          generate=dict(cfg.shapes, num_images=3, seed=1)))) == 3
    with pytest.raises(ValueError, match='generated with other shapes arguments'):
        build(dict(cfg.val_dataloader.dataset, data_root=str(tmp_path) + '/',
                   generate=dict(cfg.shapes, num_images=4, seed=1)))


def test_generation_needs_the_layout(tmp_path):
    with pytest.raises(ValueError, match='must be <root>/annotations/panoptic_<split>.json'):
        ShapesPanopticDataset(ann_file='pan.json', data_root=str(tmp_path),
                              generate=dict(num_images=1))
    with pytest.raises(ValueError, match="writes data_prefix 'seg' to"):
        ShapesPanopticDataset(ann_file='annotations/panoptic_train.json', data_root=str(tmp_path),
                              data_prefix=dict(img='train/', seg='pngs/'),
                              generate=dict(num_images=1))


def test_cli_panoptic(tmp_path, monkeypatch, capsys):
    script = REPO / 'tools' / 'dataset' / 'make_shapes.py'
    monkeypatch.setattr(sys, 'argv', [str(script), str(tmp_path), '--num-train', '2',
                                      '--num-val', '1', '--size', '32', '48', '--panoptic'])
    runpy.run_path(str(script), run_name='__main__')
    assert 'val: 1 images (32x48)' in capsys.readouterr().out
    assert len(load(tmp_path / 'annotations' / 'panoptic_val.json')['annotations']) == 1
    assert (tmp_path / 'annotations' / 'panoptic_train' / '000001.png').is_file()
