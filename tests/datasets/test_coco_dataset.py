"""CocoDataset: label mapping, box clipping, filtering and errors on bad input."""
import json
import logging

import cv2
import numpy as np
import pytest
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope

from densevit.datasets.coco import CocoDataset
from densevit.registry import DATASETS

W, H = 40, 30


def write_coco(root, data=None):
    """A tiny COCO file: category ids 7, 1, 3 (gaps, not sorted), three images."""
    (root / 'imgs').mkdir(exist_ok=True)
    for name in ('a.png', 'b.png', 'c.png'):
        cv2.imwrite(str(root / 'imgs' / name), np.zeros((H, W, 3), np.uint8))
    if data is None:
        data = dict(
            images=[dict(id=1, file_name='a.png', width=W, height=H),
                    dict(id=2, file_name='b.png', width=W, height=H),   # no annotations
                    dict(id=5, file_name='c.png', width=W, height=H)],  # only a crowd box
            annotations=[
                dict(id=1, image_id=1, category_id=3, bbox=[2, 3, 10, 5], iscrowd=0),
                dict(id=2, image_id=1, category_id=1, bbox=[0, 0, 20, 20], iscrowd=1),
                dict(id=3, image_id=1, category_id=7, bbox=[-5, 20, 15, 15], iscrowd=0),  # clipped
                dict(id=4, image_id=1, category_id=7, bbox=[50, 5, 5, 5], iscrowd=0),  # outside
                dict(id=5, image_id=1, category_id=3, bbox=[5, 5, 0, 4], iscrowd=0),  # zero width
                dict(id=6, image_id=5, category_id=1, bbox=[1, 1, 4, 4], iscrowd=1)],
            categories=[dict(id=7, name='g'), dict(id=1, name='a'), dict(id=3, name='c')])
    path = root / 'ann.json'
    path.write_text(json.dumps(data))
    return str(path), data


def build(root, **kwargs):
    return CocoDataset(ann_file='ann.json', data_root=str(root), data_prefix=dict(img='imgs/'),
                       **kwargs)


@pytest.fixture
def warnings_log():
    """Records what mmengine's current logger receives (print_log(logger='current'))."""
    records = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_labels_follow_ascending_category_id(tmp_path):
    ann_file, data = write_coco(tmp_path)
    ds = build(tmp_path)
    assert ds.cat_ids == [1, 3, 7]
    assert ds.metainfo['classes'] == ('a', 'c', 'g')
    assert ds.metainfo['cat_ids'] == (1, 3, 7)
    assert ds.cat2label == {1: 0, 3: 1, 7: 2}
    # round trip: label -> category id gives back each kept annotation's category
    info = ds.get_data_info(0)
    assert info['img_path'] == str(tmp_path / 'imgs' / 'a.png')
    assert (info['img_id'], info['height'], info['width']) == (1, H, W)
    assert [ds.label2cat[i['bbox_label']] for i in info['instances']] == [3, 1, 7]
    assert ds.get_cat_ids(0) == [1, 0, 2]


def test_boxes_xyxy_clipped_dropped_and_logged(tmp_path, warnings_log):
    ann_file, _ = write_coco(tmp_path)
    ds = build(tmp_path)
    inst = ds.get_data_info(0)['instances']
    assert [i['bbox'] for i in inst] == [[2, 3, 12, 8], [0, 0, 20, 20], [0, 20, 10, 30]]
    assert [i['ignore_flag'] for i in inst] == [0, 1, 0]
    msgs = [r.getMessage() for r in warnings_log if 'clipped' in r.getMessage()]
    assert len(msgs) == 1
    assert ann_file in msgs[0] and 'clipped 1 boxes' in msgs[0] and 'dropped 2 boxes' in msgs[0]


@pytest.mark.parametrize('filter_cfg, test_mode, img_ids', [
    (dict(filter_empty_gt=True), False, [1]),
    (dict(filter_empty_gt=True), True, [1, 2, 5]),
    (None, False, [1, 2, 5]),
    (dict(filter_empty_gt=False, min_size=H), False, [1, 2, 5]),
])
def test_filter_empty_gt(tmp_path, filter_cfg, test_mode, img_ids):
    write_coco(tmp_path)
    ds = build(tmp_path, filter_cfg=filter_cfg, test_mode=test_mode)
    assert [ds.get_data_info(i)['img_id'] for i in range(len(ds))] == img_ids


def test_filtering_everything_is_a_clear_error(tmp_path):
    ann_file, _ = write_coco(tmp_path)
    with pytest.raises(ValueError, match='none of its 3 images') as err:
        build(tmp_path, filter_cfg=dict(min_size=H + 1))
    assert ann_file in str(err.value)


def test_metainfo_classes_subset(tmp_path):
    write_coco(tmp_path)
    ds = build(tmp_path, metainfo=dict(classes=['g', 'a']))  # order given is irrelevant
    assert ds.metainfo['classes'] == ('a', 'g') and ds.cat_ids == [1, 7]
    assert [i['bbox_label'] for i in ds.get_data_info(0)['instances']] == [0, 1]
    with pytest.raises(ValueError, match="'zebra'"):
        build(tmp_path, metainfo=dict(classes=['a', 'zebra']))


def test_build_from_registry(tmp_path):
    write_coco(tmp_path)
    with DefaultScope.overwrite_default_scope('densevit'):
        ds = DATASETS.build(dict(type='CocoDataset', ann_file='ann.json', data_root=str(tmp_path),
                                 data_prefix=dict(img='imgs/'), lazy_init=True))
    assert isinstance(ds, CocoDataset) and len(ds) == 3


def test_missing_annotation_file(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        CocoDataset(ann_file='annotations/instances_train2017.json', data_root=str(tmp_path))
    msg = str(err.value)
    assert str(tmp_path / 'annotations' / 'instances_train2017.json') in msg
    assert 'Download COCO 2017' in msg and 'docs/datasets.md' in msg


@pytest.mark.parametrize('where, key', [
    ('file', 'images'), ('file', 'annotations'), ('file', 'categories'),
    ('annotation', 'bbox'), ('annotation', 'category_id'), ('annotation', 'image_id'),
    ('image', 'id'), ('image', 'file_name'), ('image', 'width'), ('image', 'height'),
])
def test_missing_key_names_key_and_file(tmp_path, where, key):
    _, data = write_coco(tmp_path)
    target = dict(file=data, annotation=data['annotations'][2], image=data['images'][1])[where]
    del target[key]
    ann_file, _ = write_coco(tmp_path, data)
    with pytest.raises(ValueError) as err:
        build(tmp_path)
    assert repr(key) in str(err.value) and ann_file in str(err.value)


def test_unknown_category_id(tmp_path):
    _, data = write_coco(tmp_path)
    data['annotations'][0]['category_id'] = 42
    ann_file, _ = write_coco(tmp_path, data)
    with pytest.raises(ValueError, match='category_id 42') as err:
        build(tmp_path)
    assert ann_file in str(err.value)


def test_invalid_json(tmp_path):
    (tmp_path / 'ann.json').write_text('{"images": [')
    with pytest.raises(ValueError, match='not valid JSON'):
        build(tmp_path)
