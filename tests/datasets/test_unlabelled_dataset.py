"""UnlabelledImageDataset (every image under a folder) and RandomResizedCrop (MAE pre-training)."""
import os

import cv2
import numpy as np
import pytest
from mmengine.registry import init_default_scope

from densevit.datasets.transforms.loading import UnreadableImageError
from densevit.datasets.transforms.random_resized_crop import RandomResizedCrop
from densevit.datasets.unreadable import SKIPPED_KEY
from densevit.registry import DATASETS

PIPELINE = [dict(type='LoadImage'), dict(type='PackDetInputs')]


def write_images(folder, names, size=(12, 16)):
    for name in names:
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        cv2.imwrite(path, np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8))


def build(**kwargs):
    init_default_scope('densevit')
    return DATASETS.build(dict(type='UnlabelledImageDataset', pipeline=PIPELINE, **kwargs))


def test_lists_every_image_recursively_without_labels(tmp_path):
    write_images(tmp_path / 'imgs', ['b.png', 'a.JPG', 'sub/c.jpeg', 'sub/deeper/d.webp'])
    (tmp_path / 'imgs' / 'notes.txt').write_text('not an image')
    ds = build(data_root=str(tmp_path), data_prefix=dict(img_path='imgs/'))
    rel = [os.path.relpath(ds.get_data_info(i)['img_path'], tmp_path / 'imgs')
           for i in range(len(ds))]
    assert rel == ['a.JPG', 'b.png', 'sub/c.jpeg', 'sub/deeper/d.webp']
    sample = ds[0]
    assert tuple(sample['inputs'].shape) == (3, 12, 16)
    assert 'gt_instances' not in sample['data_samples']
    assert len(build(data_root=str(tmp_path / 'imgs'))) == 4  # data_root alone


def test_empty_or_missing_folder_is_named(tmp_path):
    (tmp_path / 'empty' / 'sub').mkdir(parents=True)
    (tmp_path / 'empty' / 'readme.md').write_text('')
    with pytest.raises(ValueError, match=f'no images .*in {tmp_path / "empty"} or its sub-folders'):
        build(data_root=str(tmp_path / 'empty'))
    with pytest.raises(FileNotFoundError, match=f'image folder not found: .*{tmp_path / "nope"}'):
        build(data_root=str(tmp_path), data_prefix=dict(img_path='nope/'))


def test_skip_unreadable_as_the_labelled_datasets(tmp_path):
    write_images(tmp_path, ['a.png', 'b.png', 'c.png'])
    (tmp_path / 'b.png').write_bytes(b'\x89PNG\r\n\x1a\n not an image')
    with pytest.raises(UnreadableImageError, match='cannot decode image: .*b.png'):
        build(data_root=str(tmp_path))[1]
    skipping = build(data_root=str(tmp_path), skip_unreadable=True)
    sample = skipping[1]  # another image instead, the skip recorded on it
    assert sample['data_samples'].metainfo['img_path'] != str(tmp_path / 'b.png')
    assert 'b.png' in sample['data_samples'].metainfo[SKIPPED_KEY][0]
    with pytest.raises(UnreadableImageError):  # evaluation never skips
        build(data_root=str(tmp_path), skip_unreadable=True, test_mode=True)[1]


def test_generates_the_shapes_split_on_first_use(tmp_path):
    generate = dict(img_size=(24, 24), num_images=3, seed=0, min_size=6, max_size=12)
    ds = build(data_root=str(tmp_path), data_prefix=dict(img_path='train/'), generate=generate)
    assert len(ds) == 3 and (tmp_path / 'annotations' / 'instances_train.json').is_file()
    # the same arguments a ShapesDataset gives find the same split, others are refused
    with pytest.raises(ValueError, match='generated with other shapes arguments'):
        build(data_root=str(tmp_path), data_prefix=dict(img_path='train/'),
              generate=dict(generate, num_images=4))


def test_random_resized_crop_windows_and_size():
    np.random.seed(0)
    crop = RandomResizedCrop(size=(20, 30), scale=(0.2, 1.0))
    for _ in range(200):
        y0, x0, h, w = crop.window(60, 80)
        assert 0 <= y0 <= 60 - h and 0 <= x0 <= 80 - w
        assert 0.19 <= h * w / (60 * 80) <= 1.01 and 3 / 4 - 0.05 <= w / h <= 4 / 3 + 0.05
    out = crop.transform(dict(img=np.zeros((60, 80, 3), np.uint8)))
    assert out['img'].shape == (20, 30, 3) and out['img_shape'] == (20, 30)
    # a very wide image: no window of the ratio fits 10 times -> the centred square
    square = RandomResizedCrop(size=8, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert square.window(10, 40) == (0, 15, 10, 10)
    with pytest.raises(ValueError, match='scale must be'):
        RandomResizedCrop(size=8, scale=(0.5, 1.5))
