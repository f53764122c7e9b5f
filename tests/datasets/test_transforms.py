"""Detection transforms: ours, and mmcv's on numpy ``gt_bboxes``, and a full pipeline."""
import cv2
import numpy as np
import pytest
import torch
from mmengine.registry import DefaultScope

from densevit.datasets.shapes import ShapesDataset
from densevit.datasets.transforms.crop import RandomCrop
from densevit.datasets.transforms.formatting import PackDetInputs
from densevit.datasets.transforms.loading import LoadDetAnnotations, LoadImage
from densevit.registry import TRANSFORMS
from densevit.structures import DataSample


def build(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return TRANSFORMS.build(cfg)


def coord_image(h, w):
    """uint8 [h, w, 3] with channel 0 = x and channel 1 = y: a crop tells where it came from."""
    ys, xs = np.mgrid[0:h, 0:w]
    return np.stack([xs, ys, np.zeros_like(xs)], -1).astype(np.uint8)


def det_results(h=60, w=80):
    return dict(img=coord_image(h, w), img_shape=(h, w), ori_shape=(h, w),
                gt_bboxes=np.array([[10, 5, 30, 25], [50, 40, 79, 59], [0, 0, 80, 60]], np.float32),
                gt_bboxes_labels=np.array([0, 2, 1], np.int64),
                gt_ignore_flags=np.array([False, False, True]))


@pytest.mark.parametrize('name, module', [
    ('LoadImageFromFile', 'mmcv.transforms.loading'),
    ('LoadImage', 'densevit.datasets.transforms.loading'),
    ('Pad', 'mmcv.transforms.processing'),
    # densevit's subclasses of mmcv's, which also move instance masks and panoptic maps
    ('RandomFlip', 'densevit.datasets.transforms.geometric'),
    ('Resize', 'densevit.datasets.transforms.geometric')])
def test_mmcv_and_own_transforms_resolve_from_densevit_scope(name, module):
    """From the densevit scope a name finds densevit's transform where it has one, else
    mmcv's."""
    args = dict(RandomFlip=dict(prob=0.5), Resize=dict(scale=(8, 8)),
                Pad=dict(size=(8, 8))).get(name, {})
    built = build(dict(type=name, **args))
    assert (type(built).__module__, type(built).__name__) == (module, name)


def test_load_image_errors_name_the_file(tmp_path):
    missing, corrupt = tmp_path / 'missing.png', tmp_path / 'corrupt.png'
    corrupt.write_bytes(b'\x89PNG not really')
    with pytest.raises(FileNotFoundError, match=f'image not found: {missing}'):
        LoadImage()(dict(img_path=str(missing)))
    with pytest.raises(ValueError, match=f'cannot decode image: {corrupt}'):
        LoadImage()(dict(img_path=str(corrupt)))
    assert LoadImage(ignore_empty=True)(dict(img_path=str(corrupt))) is None
    good = tmp_path / 'good.png'
    cv2.imwrite(str(good), coord_image(6, 9))
    out = LoadImage()(dict(img_path=str(good)))
    assert out['img'].shape == (6, 9, 3) and out['img_shape'] == out['ori_shape'] == (6, 9)


def test_load_det_annotations():
    out = LoadDetAnnotations()(dict(instances=[
        dict(bbox=[1, 2, 3, 4], bbox_label=2, ignore_flag=1),
        dict(bbox=[0, 0, 5, 5], bbox_label=0, ignore_flag=0)]))
    assert out['gt_bboxes'].dtype == np.float32 and out['gt_bboxes'].shape == (2, 4)
    assert out['gt_bboxes_labels'].dtype == np.int64 and out['gt_bboxes_labels'].tolist() == [2, 0]
    assert out['gt_ignore_flags'].tolist() == [True, False]
    empty = LoadDetAnnotations()(dict(instances=[]))
    assert empty['gt_bboxes'].shape == (0, 4) and empty['gt_bboxes_labels'].shape == (0,)


def test_mmcv_resize_scales_boxes_and_records_wh_scale_factor():
    out = build(dict(type='Resize', scale=(160, 30), keep_ratio=False))(det_results())
    assert out['img_shape'] == (30, 160) and out['scale_factor'] == (2.0, 0.5)
    np.testing.assert_allclose(out['gt_bboxes'][0], [20, 2.5, 60, 12.5])


@pytest.mark.parametrize('direction', ['horizontal', 'vertical'])
def test_mmcv_random_flip_flips_boxes(direction):
    res = det_results()
    x1, y1, x2, y2 = res['gt_bboxes'][0]
    out = build(dict(type='RandomFlip', prob=1.0, direction=direction))(res)
    if direction == 'horizontal':
        expected = [80 - x2, y1, 80 - x1, y2]
    else:
        expected = [x1, 60 - y2, x2, 60 - y1]
    np.testing.assert_allclose(out['gt_bboxes'][0], expected)
    assert out['flip'] and out['flip_direction'] == direction


def test_mmcv_random_choice_resize_inside_random_choice():
    t = build(dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=[(40, 120)], keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(40, 120)], keep_ratio=True)]]))
    out = t(det_results())
    # keep_ratio: the shorter side goes to min(scale) unless the longer would pass max(scale)
    assert out['img_shape'] == (40, 53) and out['img'].shape[:2] == (40, 53)
    sw, sh = out['scale_factor']
    assert (sw, sh) == pytest.approx((53 / 80, 40 / 60))
    np.testing.assert_allclose(out['gt_bboxes'][1], [50 * sw, 40 * sh, 79 * sw, 59 * sh], rtol=1e-6)


def test_random_crop_shifts_clips_and_drops():
    np.random.seed(0)
    for _ in range(20):
        res = det_results()
        out = RandomCrop(crop_size=(20, 30), crop_type='absolute')(res)
        x0, y0 = out['img'][0, 0, :2].astype(np.float32)  # where the window started
        assert out['img'].shape[:2] == out['img_shape'] == (20, 30)
        boxes = det_results()['gt_bboxes'] - [x0, y0, x0, y0]
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, 30)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, 20)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        np.testing.assert_allclose(out['gt_bboxes'], boxes[keep])
        assert out['gt_bboxes_labels'].tolist() == np.array([0, 2, 1])[keep].tolist()
        assert out['gt_ignore_flags'].tolist() == np.array([False, False, True])[keep].tolist()
        assert len(out['gt_bboxes']) < 3 or keep.all()


def test_random_crop_absolute_range_and_negative_crop():
    np.random.seed(1)
    sizes = {RandomCrop(crop_size=(20, 50))(det_results())['img_shape'] for _ in range(30)}
    assert all(20 <= h <= 50 and 20 <= w <= 50 for h, w in sizes) and len(sizes) > 5
    # windows never exceed the image
    assert RandomCrop(crop_size=(100, 200))(det_results())['img_shape'] == (60, 80)
    res = det_results()
    res['gt_bboxes'] = np.array([[70, 50, 80, 60]], np.float32)  # a corner most windows miss
    res['gt_bboxes_labels'], res['gt_ignore_flags'] = np.array([1]), np.array([False])
    out = RandomCrop(crop_size=(10, 10), crop_type='absolute', allow_negative_crop=False,
                     max_tries=1000)(res)
    assert len(out['gt_bboxes']) == 1


def test_pack_det_inputs():
    res = det_results()
    res.update(img_id=3, img_path='x.png', scale_factor=(1.0, 1.0), flip=False)
    out = PackDetInputs()(res)
    assert out['inputs'].shape == (3, 60, 80) and out['inputs'].dtype == torch.uint8
    assert torch.equal(out['inputs'][0], torch.from_numpy(res['img'][..., 0]))
    sample = out['data_samples']
    assert isinstance(sample, DataSample)
    assert sample.gt_instances.bboxes.dtype == torch.float32
    assert sample.gt_instances.labels.dtype == torch.int64
    assert sample.gt_instances.labels.tolist() == [0, 2]
    assert sample.ignored_instances.bboxes.tolist() == [[0, 0, 80, 60]]
    assert sample.img_id == 3 and sample.img_shape == (60, 80) and sample.ori_shape == (60, 80)
    assert 'flip_direction' not in sample.metainfo_keys()


PIPELINE = [
    dict(type='LoadImage'),
    dict(type='LoadDetAnnotations'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=[(56, 200), (72, 200)], keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(48, 200), (64, 200)], keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(24, 40)),
         dict(type='RandomChoiceResize', scales=[(56, 200), (72, 200)], keep_ratio=True)]]),
    dict(type='PackDetInputs'),
]


@pytest.fixture(scope='module')
def shapes_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp('shapes'))


def shapes_dataset(root, pipeline):
    with DefaultScope.overwrite_default_scope('densevit'):
        from densevit.registry import DATASETS
        return DATASETS.build(dict(
            type='ShapesDataset', data_root=root, ann_file='annotations/instances_train.json',
            data_prefix=dict(img='train/'), pipeline=pipeline,
            generate=dict(num_images=4, img_size=(48, 64), seed=0)))


def test_full_pipeline_keeps_boxes_inside_the_image(shapes_root):
    np.random.seed(0)
    ds = shapes_dataset(shapes_root, PIPELINE)
    assert isinstance(ds, ShapesDataset)
    flips = set()
    for i in range(24):
        out = ds[i % len(ds)]
        sample, (c, h, w) = out['data_samples'], out['inputs'].shape
        assert (c, h, w) == (3, *sample.img_shape)
        boxes = sample.gt_instances.bboxes
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()
        assert (boxes[:, 2:] > boxes[:, :2]).all()
        flips.add(sample.flip)
    assert flips == {True, False}


def test_pipeline_flip_matches_hand_computed(shapes_root):
    ds = shapes_dataset(shapes_root, [
        dict(type='LoadImage'), dict(type='LoadDetAnnotations'),
        dict(type='RandomFlip', prob=1.0), dict(type='PackDetInputs')])
    info = ds.get_data_info(0)
    w = info['width']
    expected = [[w - x2, y1, w - x1, y2]
                for x1, y1, x2, y2 in (i['bbox'] for i in info['instances'])]
    assert ds[0]['data_samples'].gt_instances.bboxes.tolist() == expected
    assert ds[0]['data_samples'].flip_direction == 'horizontal'
