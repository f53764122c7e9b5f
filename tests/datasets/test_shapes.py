"""Procedural shapes: determinism, tight boxes, on-demand generation and the CLI."""
import json
import os
import runpy
import sys
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from densevit.datasets.shapes import (
    ShapesDataset,
    ensure_shapes_split,
    generate_shapes,
    render_image,
)

SIZE = (40, 56)


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob('*'))
            if p.is_file()}


def load(ann_file):
    with open(ann_file) as f:
        return json.load(f)


def test_same_seed_same_bytes(tmp_path):
    generate_shapes(tmp_path / 'a', 'train', 5, SIZE, seed=3)
    generate_shapes(tmp_path / 'b', 'train', 5, SIZE, seed=3)
    generate_shapes(tmp_path / 'c', 'train', 5, SIZE, seed=4)
    generate_shapes(tmp_path / 'd', 'val', 5, SIZE, seed=3)
    a = files(tmp_path / 'a')
    assert len(a) == 6 and a == files(tmp_path / 'b')
    assert a['train/000000.png'] != files(tmp_path / 'c')['train/000000.png']
    assert a['train/000000.png'] != files(tmp_path / 'd')['val/000000.png']


def test_coco_format(tmp_path):
    data = load(generate_shapes(tmp_path, 'train', 6, SIZE, seed=0))
    assert data['categories'] == [dict(id=1, name='circle'), dict(id=2, name='rectangle'),
                                  dict(id=3, name='triangle')]
    assert [im['file_name'] for im in data['images']] == [f'{i:06d}.png' for i in range(6)]
    assert all((im['height'], im['width']) == SIZE for im in data['images'])
    assert len({a['id'] for a in data['annotations']}) == len(data['annotations']) > 0
    for a in data['annotations']:
        x, y, w, h = a['bbox']
        assert a['iscrowd'] == 0 and 0 < a['area'] <= w * h
        assert x >= 0 and y >= 0 and x + w <= SIZE[1] and y + h <= SIZE[0]


def nonzero_box(mask):
    ys, xs = np.nonzero(mask)
    return [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()]


def test_boxes_tightly_enclose_drawn_pixels(tmp_path):
    """Checked against the PNG on disk: on a flat background every changed pixel is a shape."""
    def drawn_pixels(path):
        colours = (cv2.imread(str(path)).astype(np.int64) @ [1, 256, 65536])
        return colours != np.bincount(colours.ravel()).argmax()  # background: the commonest colour

    ann = load(generate_shapes(tmp_path, 'one', 8, SIZE, seed=1, max_objects=1, background='flat'))
    for im in ann['images']:
        drawn = drawn_pixels(tmp_path / 'one' / im['file_name'])
        boxes = [a['bbox'] for a in ann['annotations'] if a['image_id'] == im['id']]
        assert boxes == [nonzero_box(drawn)]

    ann = load(generate_shapes(tmp_path, 'many', 8, SIZE, seed=2, max_objects=5, background='flat'))
    for im in ann['images']:
        drawn = drawn_pixels(tmp_path / 'many' / im['file_name'])
        covered = np.zeros(SIZE, bool)
        for x, y, w, h in (a['bbox'] for a in ann['annotations'] if a['image_id'] == im['id']):
            box = drawn[y:y + h, x:x + w]
            # tight: every border row and column of the box holds drawn pixels
            assert box[0].any() and box[-1].any() and box[:, 0].any() and box[:, -1].any()
            covered[y:y + h, x:x + w] = True
        assert not (drawn & ~covered).any()


def test_rendered_masks_match_boxes_and_class_map():
    out = render_image(np.random.default_rng(5), SIZE, max_objects=6, min_size=6, max_size=24)
    assert out['img'].shape == (*SIZE, 3) and out['img'].dtype == np.uint8
    union = np.zeros(SIZE, bool)
    for shape in out['shapes']:
        assert not (union & shape['mask']).any()  # visible masks partition the shapes' pixels
        union |= shape['mask']
        assert (out['class_map'][shape['mask']] == shape['category_id']).all()
    assert (out['class_map'][~union] == 0).all()


def _disk_areas(max_size):
    """Pixel count of a whole disk per radius, drawn as the renderer draws circles."""
    areas = {}
    for r in range(1, max_size // 2 + 1):
        canvas = np.zeros((max_size + 4, max_size + 4), np.uint8)
        cv2.circle(canvas, (max_size // 2 + 2, max_size // 2 + 2), r, 1, thickness=-1)
        areas[r] = int(canvas.sum())
    return set(areas.values())


@pytest.mark.parametrize('whole', [True, False])
def test_inside_and_min_visible_keep_shapes_whole(whole):
    # inside + min_visible=1: no shape cut by the border or hidden by another, so every
    # circle has exactly the pixel count of a whole disk; the defaults cut some
    kwargs = dict(inside=True, min_visible=1.0) if whole else {}
    disks, whole_circles, circles = _disk_areas(24), 0, 0
    for seed in range(40):
        out = render_image(np.random.default_rng(seed), SIZE, max_objects=6, min_size=6,
                           max_size=24, **kwargs)
        for shape in out['shapes']:
            if shape['category_id'] == 1:
                circles += 1
                whole_circles += int(shape['mask'].sum()) in disks
    assert circles > 20
    assert (whole_circles == circles) if whole else (whole_circles < circles)


def test_inside_shapes_that_cannot_fit_are_refused():
    with pytest.raises(ValueError, match='min_size 40 does not fit a 40x56 image'):
        render_image(np.random.default_rng(0), SIZE, min_size=40, max_size=48, inside=True)
    # the largest that fits still renders (centre range not empty)
    out = render_image(np.random.default_rng(0), SIZE, min_size=39, max_size=60, inside=True)
    assert out['shapes']


def test_dataset_generates_once(tmp_path):
    kwargs = dict(data_root=str(tmp_path), ann_file='annotations/instances_val.json',
                  data_prefix=dict(img='val/'), generate=dict(num_images=3, img_size=SIZE, seed=0))
    ds = ShapesDataset(**kwargs)
    assert len(ds) == 3 and ds.metainfo['classes'] == ('circle', 'rectangle', 'triangle')
    assert os.path.isfile(ds.get_data_info(0)['img_path'])
    ann_file = tmp_path / 'annotations' / 'instances_val.json'
    mtime = ann_file.stat().st_mtime_ns
    ShapesDataset(**kwargs)
    assert ann_file.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(tmp_path)) == ['annotations', 'val']  # no temporary folders left
    with pytest.raises(ValueError, match=r'instances_val.json was generated with.*seed: 0 -> 1'):
        ShapesDataset(**{**kwargs, 'generate': dict(num_images=3, img_size=SIZE, seed=1)})
    with pytest.raises(ValueError, match='data_prefix'):
        ShapesDataset(**{**kwargs, 'ann_file': 'annotations/instances_x.json'})


def test_concurrent_generation(tmp_path):
    """Ranks starting together: one generates, the others wait, all see the same split."""
    ann_file = str(tmp_path / 'annotations' / 'instances_train.json')
    errors = []

    def rank():
        try:
            ensure_shapes_split(ann_file, num_images=4, img_size=SIZE, seed=7)
            assert len(load(ann_file)['images']) == 4
        except Exception as e:  # surfaced below: a thread's exception does not fail the test
            errors.append(e)

    threads = [threading.Thread(target=rank) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    generate_shapes(tmp_path / 'ref', 'train', 4, SIZE, seed=7)
    got = {k: v for k, v in files(tmp_path).items() if not k.startswith(('ref/', 'annotations/.'))}
    assert got == files(tmp_path / 'ref')


def test_cli(tmp_path, monkeypatch, capsys):
    script = Path(__file__).parents[2] / 'tools' / 'dataset' / 'make_shapes.py'
    monkeypatch.setattr(sys, 'argv', [str(script), str(tmp_path), '--num-train', '3',
                                      '--num-val', '2', '--size', '32', '48', '--seed', '1'])
    runpy.run_path(str(script), run_name='__main__')
    printed = capsys.readouterr().out
    assert 'train: 3 images (32x48)' in printed and 'val: 2 images' in printed
    assert len(load(tmp_path / 'annotations' / 'instances_val.json')['images']) == 2
    assert sorted(os.listdir(tmp_path / 'train')) == ['000000.png', '000001.png', '000002.png']
