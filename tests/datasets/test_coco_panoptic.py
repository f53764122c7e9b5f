"""CocoPanopticDataset and LoadPanopticAnnotations on a 6x8 panoptic PNG written by hand:
label order, id decoding, the semantic / panoptic / instance targets, geometry, and every
bad input refused naming the file or the value."""
import json

import numpy as np
import pytest
import torch
from hand_fixtures import (
    CATEGORIES,
    CLASSES,
    IDS,
    PAN,
    SEGMENTS,
    SEM,
    panoptic_dataset,
    write_panoptic,
    write_png,
)
from mmengine.registry import DefaultScope

from densevit.datasets.transforms.loading import DataError, LoadImage
from densevit.datasets.transforms.panoptic_loading import LoadPanopticAnnotations
from densevit.registry import TRANSFORMS
from densevit.structures.panoptic import INSTANCE_OFFSET, id_to_rgb, rgb_to_id


def load(root, **kwargs):
    info = panoptic_dataset(root, **kwargs).get_data_info(0)
    return LoadPanopticAnnotations()(LoadImage()(info))


def test_labels_are_things_then_stuff_each_by_id(tmp_path):
    write_panoptic(tmp_path)
    ds = panoptic_dataset(tmp_path)
    assert ds.metainfo['classes'] == CLASSES
    assert ds.metainfo['thing_classes'] == ('person', 'car')
    assert ds.metainfo['stuff_classes'] == ('sky', 'road')
    assert ds.cat_ids == [2, 5, 7, 20] and ds.num_things == 2
    info = ds.get_data_info(0)
    assert info['img_id'] == 3 and info['num_classes'] == 4
    assert info['seg_map_path'] == f'{tmp_path}/pan/a.png'
    assert info['segments_info'] == [
        dict(id=300, category=2, is_thing=False, iscrowd=False),
        dict(id=70000, category=0, is_thing=True, iscrowd=False),
        dict(id=5, category=1, is_thing=True, iscrowd=False),
        dict(id=9, category=0, is_thing=True, iscrowd=True),
        dict(id=12, category=3, is_thing=False, iscrowd=False)]
    assert ds.get_cat_ids(0) == [2, 0, 1, 0, 3]


def test_colours_decode_to_segment_ids():
    # id = R + 256 G + 256^2 B, written out: 70000 = 112 + 256 * 17 + 65536 * 1
    assert rgb_to_id(np.array([[112, 17, 1], [44, 1, 0], [0, 0, 0]])).tolist() == [70000, 300, 0]
    assert id_to_rgb([70000, 300]).tolist() == [[112, 17, 1], [44, 1, 0]]
    assert INSTANCE_OFFSET == 1000


def test_targets_match_the_hand_written_maps(tmp_path):
    write_panoptic(tmp_path)
    out = load(tmp_path)
    np.testing.assert_array_equal(out['gt_seg_map'], SEM)
    assert out['gt_seg_map'].dtype == np.uint8
    np.testing.assert_array_equal(out['gt_panoptic_seg'], PAN)
    assert out['panoptic_void'] == 4
    # thing segments in segments_info order: the person, the car, the crowd (ignored)
    assert out['gt_bboxes_labels'].tolist() == [0, 1, 0]
    assert out['gt_ignore_flags'].tolist() == [False, False, True]
    np.testing.assert_array_equal(out['gt_bboxes'], [[1, 2, 3, 5], [5, 3, 8, 6], [0, 5, 2, 6]])
    for mask, seg_id in zip(out['gt_masks'], (70000, 5, 9), strict=True):
        np.testing.assert_array_equal(mask, IDS == seg_id)


def test_packed_sample_follows_mmdetection(tmp_path):
    write_panoptic(tmp_path)
    with DefaultScope.overwrite_default_scope('densevit'):
        ds = panoptic_dataset(tmp_path, [dict(type='LoadImage'),
                                         dict(type='LoadPanopticAnnotations'),
                                         dict(type='PackDetInputs')])
        sample = ds[0]['data_samples']
    assert sample.gt_instances.labels.tolist() == [0, 1]
    assert sample.gt_instances.masks.shape == (2, 6, 8)
    assert sample.ignored_instances.labels.tolist() == [0]  # the crowd
    assert torch.equal(sample.ignored_instances.masks[0], torch.from_numpy(IDS == 9))
    assert sample.gt_sem_seg.data.shape == (1, 6, 8)
    assert torch.equal(sample.gt_sem_seg.data[0], torch.from_numpy(SEM).long())
    assert torch.equal(sample.gt_panoptic_seg.data[0], torch.from_numpy(PAN).long())
    assert sample.gt_panoptic_seg.ignore_index == 4
    assert sample.seg_map_path == f'{tmp_path}/pan/a.png'


def test_flip_and_test_time_resize(tmp_path):
    write_panoptic(tmp_path)
    info = panoptic_dataset(tmp_path).get_data_info(0)
    with DefaultScope.overwrite_default_scope('densevit'):
        flip = TRANSFORMS.build(dict(type='RandomFlip', prob=1.0))
        resize = TRANSFORMS.build(dict(type='Resize', scale=(16, 12), keep_ratio=False))
    out = flip(LoadPanopticAnnotations()(LoadImage()(dict(info))))
    np.testing.assert_array_equal(out['gt_panoptic_seg'], PAN[:, ::-1])
    np.testing.assert_array_equal(out['gt_seg_map'], SEM[:, ::-1])
    np.testing.assert_array_equal(out['gt_masks'][0], (IDS == 70000)[:, ::-1])
    np.testing.assert_array_equal(out['gt_bboxes'][0], [8 - 3, 2, 8 - 1, 5])
    out = resize(LoadPanopticAnnotations()(LoadImage()(dict(info))))  # training: resized
    np.testing.assert_array_equal(out['gt_panoptic_seg'], PAN.repeat(2, 0).repeat(2, 1))
    # test: loaded after the Resize, the targets stay at the original size and pack so
    out = LoadPanopticAnnotations()(resize(LoadImage()(dict(info))))
    with DefaultScope.overwrite_default_scope('densevit'):
        sample = TRANSFORMS.build(dict(type='PackDetInputs'))(out)['data_samples']
    assert sample.img_shape == (12, 16) and sample.gt_panoptic_seg.data.shape == (1, 6, 8)


def test_a_missing_png_is_refused_when_the_dataset_loads(tmp_path):
    write_panoptic(tmp_path, ids=None)
    with pytest.raises(DataError, match=f'pan.json: panoptic PNGs not found: {tmp_path}/pan/a.png'):
        panoptic_dataset(tmp_path)
    # collect_problems (tools/dataset/check.py) loads it; the first read names the PNG
    info = panoptic_dataset(tmp_path, collect_problems=True).get_data_info(0)
    with pytest.raises(FileNotFoundError, match=f'panoptic PNG not found: {tmp_path}/pan/a.png'):
        LoadPanopticAnnotations()(LoadImage()(info))


def test_a_png_of_another_size_is_refused_on_first_read(tmp_path):
    write_panoptic(tmp_path)
    write_png(tmp_path / 'pan' / 'a.png', IDS[:5])
    with pytest.raises(DataError, match=f'panoptic PNG {tmp_path}/pan/a.png is 5x8 \\(HxW\\) '
                                        f'but its image {tmp_path}/img/a.png is 6x8'):
        load(tmp_path)


def test_segment_ids_of_json_and_png_must_agree(tmp_path):
    write_panoptic(tmp_path, ids=np.where(IDS == 5, 12, IDS))  # the car painted over
    with pytest.raises(DataError, match=f'panoptic PNG {tmp_path}/pan/a.png: segment ids 5 of '
                                        'its segments_info are absent from the PNG'):
        load(tmp_path)
    write_panoptic(tmp_path, segments=[s for s in SEGMENTS if s['id'] not in (9, 300)])
    with pytest.raises(DataError, match=f'panoptic PNG {tmp_path}/pan/a.png holds segment ids '
                                        '9, 300 that its segments_info does not list'):
        load(tmp_path)


def test_a_one_channel_png_is_refused(tmp_path):
    import cv2
    write_panoptic(tmp_path)
    cv2.imwrite(str(tmp_path / 'pan' / 'a.png'), SEM.astype(np.uint8))
    with pytest.raises(DataError, match=f'panoptic PNG {tmp_path}/pan/a.png has 1 channel'):
        load(tmp_path)


@pytest.mark.parametrize('change, message', [
    (lambda d: [c.pop('isthing') for c in d['categories'][:3:2]],
     'categories without "isthing": 7 \\(sky\\), 20 \\(road\\)'),
    (lambda d: d['categories'][1].update(isthing='yes'),
     "category 2 \\(person\\) has isthing='yes'; expected 0 \\(stuff\\) or 1 \\(thing\\)"),
    (lambda d: d['annotations'][0]['segments_info'][1].update(category_id=99),
     'annotation a.png \\(image 3\\): segment 70000 has category_id 99, which is not in'),
    (lambda d: d['annotations'][0]['segments_info'][1].update(id=300),
     'annotation a.png \\(image 3\\): segment id 300 is listed twice'),
    (lambda d: d['annotations'][0]['segments_info'][1].update(id=0),
     'annotation a.png \\(image 3\\): segment id 0 is not an integer in 1..16777215'),
    (lambda d: d['annotations'][0]['segments_info'][1].pop('category_id'),
     "annotation a.png \\(image 3\\): segment #1 has no key 'category_id'"),
    (lambda d: d['annotations'][0].update(image_id=8),
     'annotation a.png has image_id 8, which is not in "images"'),
    (lambda d: d['annotations'].append(dict(d['annotations'][0], file_name='b.png')),
     'image 3 \\(a.png\\) has two annotations \\(a.png, b.png\\)'),
    (lambda d: d['images'].append(dict(id=4, file_name='z.png', width=8, height=6)),
     'images without an annotation \\(segments_info and PNG\\): z.png'),
    (lambda d: d['annotations'][0].pop('segments_info'), "annotation #0 has no key 'segments_info'"),
])
def test_bad_json_is_refused_naming_the_file_and_value(tmp_path, change, message):
    ann_file = write_panoptic(tmp_path)
    data = json.loads((tmp_path / 'pan.json').read_text())
    change(data)
    (tmp_path / 'pan.json').write_text(json.dumps(data))
    with pytest.raises(DataError, match=f'{ann_file}: {message}'):
        panoptic_dataset(tmp_path)


def test_classes_must_be_the_label_order_and_filtering(tmp_path):
    write_panoptic(tmp_path)
    with pytest.raises(DataError, match='metainfo classes .* are not its categories in label '
                                        'order'):
        panoptic_dataset(tmp_path, metainfo=dict(classes=('sky', 'person', 'road', 'car')))
    assert len(panoptic_dataset(tmp_path, metainfo=dict(classes=CLASSES))) == 1
    # an image whose only thing is a crowd has no trainable instance
    write_panoptic(tmp_path, ids=np.where(np.isin(IDS, (70000, 5)), 12, IDS),
                   segments=[s for s in SEGMENTS if s['id'] not in (70000, 5)])
    with pytest.raises(DataError, match='none of its 1 images is left after filtering'):
        panoptic_dataset(tmp_path, filter_cfg=dict(filter_empty_gt=True))
    assert len(panoptic_dataset(tmp_path, filter_cfg=dict(filter_empty_gt=True),
                                test_mode=True)) == 1
    assert [c['id'] for c in CATEGORIES] == [7, 2, 20, 5]  # the fixture itself is unsorted
