"""Data that cannot train (user study of bad input): one line naming the file, raised
when the dataset is loaded or the sample first used, as a DataError (a ValueError).

- Every annotation iscrowd=1: no box the loss can match. It used to train on "no
  object" alone (or fail after filtering with a deep traceback).
- A colour (RGB) label map: refused when the dataset loads if it is the first map,
  else when the map is first used, also from a DataLoader worker, whose re-raised
  copy still gives the one line (``image_error_line``, what the tools print).
"""
import json

import cv2
import numpy as np
import pytest
from mmengine.registry import DefaultScope
from torch.utils.data import DataLoader

from densevit.datasets.coco import CocoDataset
from densevit.datasets.seg_folder import SegFolderDataset
from densevit.datasets.transforms.loading import DataError, image_error_line


def all_crowd(tmp_path):
    data = dict(images=[dict(id=i, file_name=f'{i}.png', width=50, height=40) for i in (1, 2)],
                annotations=[dict(id=i, image_id=1 + i % 2, category_id=1, iscrowd=1,
                                  bbox=[5 * i, 5, 10, 10]) for i in (1, 2, 3)],
                categories=[dict(id=1, name='person')])
    path = tmp_path / 'crowd.json'
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize('filter_cfg', [None, dict(filter_empty_gt=True)])
def test_all_crowd_training_set_is_refused_when_loaded(tmp_path, filter_cfg):
    ann_file = all_crowd(tmp_path)
    with pytest.raises(DataError) as e:
        CocoDataset(ann_file=str(ann_file), filter_cfg=filter_cfg)
    assert str(e.value) == (
        f'{ann_file}: no trainable box in its 2 images: all 3 of its boxes are iscrowd=1 or '
        'ignore (never matched, never penalised); a training set needs boxes with iscrowd=0 '
        '(test_mode=True evaluates such a file)')
    assert len(CocoDataset(ann_file=str(ann_file), test_mode=True)) == 2  # evaluation may


def seg_folder(tmp_path, rgb_index):
    """Three 8x8 images with label maps; map ``rgb_index`` colour-coded (3 channels)."""
    for sub in ('img', 'seg'):
        (tmp_path / sub).mkdir()
    for i in range(3):
        cv2.imwrite(str(tmp_path / 'img' / f'{i}.png'), np.zeros((8, 8, 3), np.uint8))
        label = np.ones((8, 8), np.uint8)
        cv2.imwrite(str(tmp_path / 'seg' / f'{i}.png'),
                    np.stack([label * 255] * 3, -1) if i == rgb_index else label)
    with DefaultScope.overwrite_default_scope('densevit'):
        return SegFolderDataset(
            data_root=str(tmp_path), data_prefix=dict(img_path='img', seg_map_path='seg'),
            img_suffix='.png', metainfo=dict(classes=('bg', 'fg')),
            pipeline=[dict(type='LoadImage'), dict(type='LoadSegAnnotations'),
                      dict(type='PackSegInputs')])


def rgb_message(path):
    return (f'label map {path} has 3 channels (mode RGB): expected one class index per pixel '
            '(a single-channel or palette PNG); convert colour-coded maps to class indices first')


def test_rgb_label_map_first_in_the_folder_is_refused_when_loaded(tmp_path):
    with pytest.raises(DataError) as e:
        seg_folder(tmp_path, rgb_index=0)
    assert str(e.value) == rgb_message(tmp_path / 'seg' / '0.png')


def test_rgb_label_map_later_is_refused_in_one_line_also_from_a_worker(tmp_path):
    dataset = seg_folder(tmp_path, rgb_index=2)
    assert dataset[1]['data_samples'].gt_sem_seg.data.max() == 1
    with pytest.raises(DataError) as e:
        dataset[2]
    assert str(e.value) == rgb_message(tmp_path / 'seg' / '2.png')
    loader = DataLoader(dataset, batch_size=1, num_workers=1, collate_fn=list)
    with pytest.raises(DataError) as e:
        list(loader)
    assert 'Traceback' in str(e.value)  # the worker's copy carries its traceback ...
    assert image_error_line(e.value) == rgb_message(tmp_path / 'seg' / '2.png')  # ... and the line
