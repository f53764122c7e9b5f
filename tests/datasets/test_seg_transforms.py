"""Segmentation transforms: label loading and checks, image modes, crop, photometric, packing."""
import cv2
import numpy as np
import pytest
import torch
from mmengine.registry import DefaultScope
from PIL import Image

from densevit.datasets.transforms.crop import RandomCrop
from densevit.datasets.transforms.loading import LoadImage
from densevit.datasets.transforms.photometric import PhotoMetricDistortion
from densevit.datasets.transforms.seg_formatting import PackSegInputs
from densevit.datasets.transforms.seg_loading import LoadSegAnnotations, reduce_zero_label
from densevit.registry import TRANSFORMS


def load_seg(path, ori_shape, **kwargs):
    results = dict(seg_map_path=str(path), ori_shape=ori_shape, img_path='img.jpg', **kwargs)
    return LoadSegAnnotations()(results)


def test_reduce_zero_label_mapping():
    seg = np.array([0, 1, 2, 150, 254, 255], np.uint8)
    assert reduce_zero_label(seg).tolist() == [255, 0, 1, 149, 253, 255]


def test_load_seg_reads_png_as_stored(tmp_path):
    seg = np.array([[0, 1, 2], [3, 255, 1]], np.uint8)
    cv2.imwrite(str(tmp_path / 'gray.png'), seg)
    out = load_seg(tmp_path / 'gray.png', (2, 3), num_classes=4)
    assert out['gt_seg_map'].dtype == np.uint8 and out['gt_seg_map'].tolist() == seg.tolist()
    assert out['reduce_zero_label'] is False
    # palette PNGs (VOC style): indices, not the colours OpenCV would expand them to
    pal = Image.fromarray(seg, mode='P')
    pal.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * 756)
    pal.save(tmp_path / 'pal.png')
    assert load_seg(tmp_path / 'pal.png', (2, 3), num_classes=4)['gt_seg_map'].tolist() == \
        seg.tolist()
    # 16-bit label maps keep their values
    cv2.imwrite(str(tmp_path / 'wide.png'), np.array([[0, 300]], np.uint16))
    wide = load_seg(tmp_path / 'wide.png', (1, 2), num_classes=400)['gt_seg_map']
    assert wide.tolist() == [[0, 300]] and wide.dtype == np.int32


def test_load_seg_refuses_colour_maps_and_missing_files(tmp_path):
    cv2.imwrite(str(tmp_path / 'rgb.png'), np.zeros((2, 3, 3), np.uint8))
    with pytest.raises(ValueError, match='rgb.png has 3 channels'):
        load_seg(tmp_path / 'rgb.png', (2, 3))
    with pytest.raises(FileNotFoundError, match='label map not found: .*nope.png'):
        load_seg(tmp_path / 'nope.png', (2, 3))


def test_load_seg_hints_reduce_zero_label(tmp_path):
    cv2.imwrite(str(tmp_path / 'a.png'), np.array([[1, 4]], np.uint8))
    with pytest.raises(ValueError, match='values 4 outside 0..3.*reduce_zero_label=True'):
        load_seg(tmp_path / 'a.png', (1, 2), num_classes=4)
    out = load_seg(tmp_path / 'a.png', (1, 2), num_classes=4, reduce_zero_label=True)
    assert out['gt_seg_map'].tolist() == [[0, 3]] and out['reduce_zero_label'] is True


@pytest.mark.parametrize('kind', ['gray', 'rgba', 'gray16', 'color16'])
def test_images_of_any_png_mode_load_as_3_channel_uint8(tmp_path, kind):
    h, w = 5, 7
    ramp = np.arange(h * w).reshape(h, w)
    img = dict(gray=(ramp * 7).astype(np.uint8),
               rgba=np.dstack([(ramp * 7).astype(np.uint8)] * 3 + [np.full((h, w), 9, np.uint8)]),
               gray16=(ramp * 1800).astype(np.uint16),
               color16=np.dstack([(ramp * 1800).astype(np.uint16)] * 3))[kind]
    path = tmp_path / f'{kind}.png'
    cv2.imwrite(str(path), img)
    out = LoadImage()(dict(img_path=str(path)))['img']
    assert out.shape == (h, w, 3) and out.dtype == np.uint8
    if kind.endswith('16'):  # 16-bit is scaled to 8 bits (high byte), not clipped
        assert out[-1, -1, 0] == (34 * 1800) >> 8
    else:
        assert out[-1, -1, 0] == 34 * 7


def seg_results(seg):
    h, w = seg.shape
    return dict(img=np.zeros((h, w, 3), np.uint8), img_shape=(h, w), gt_seg_map=seg)


def test_random_crop_cat_max_ratio_retries_until_no_class_dominates():
    # class 0 fills the top, class 1 the bottom quarter: a 10x10 window is balanced only
    # if it reaches 3..7 rows into the strip (5 of 31 positions); 10 tries find one
    # about 83% of the time, a single try 16%
    seg = np.zeros((40, 10), np.uint8)
    seg[30:] = 1
    np.random.seed(0)
    crop = RandomCrop(crop_size=(10, 10), crop_type='absolute', cat_max_ratio=0.75)
    balanced = 0
    for _ in range(20):
        counts = np.bincount(crop(seg_results(seg.copy()))['gt_seg_map'].ravel(), minlength=2)
        balanced += counts.max() < 0.75 * counts.sum()
    assert balanced >= 12
    # ignored pixels do not count: 92% ignore with a 50/50 rest is balanced
    seg = np.full((10, 10), 255, np.uint8)
    seg[:2, :2] = 0
    seg[:2, 2:4] = 1
    assert crop._classes_balanced(seg, 0, 0, 10, 10)
    assert crop._classes_balanced(seg, 0, 0, 2, 3)  # 4 zeros, 2 ones: 67% < 75%
    assert not crop._classes_balanced(seg, 0, 0, 2, 2)  # one class only
    assert not crop._classes_balanced(seg, 5, 5, 5, 5)  # nothing but ignore


def test_random_crop_keeps_last_window_when_no_crop_qualifies():
    seg = np.zeros((30, 30), np.uint8)  # one class everywhere: never balanced
    out = RandomCrop(crop_size=(8, 12), crop_type='absolute', cat_max_ratio=0.75)(
        seg_results(seg))
    assert out['gt_seg_map'].shape == (8, 12) and out['img'].shape[:2] == (8, 12)


def test_photometric_distortion_changes_colours_only():
    img = np.random.RandomState(0).randint(0, 256, (6, 8, 3)).astype(np.uint8)
    np.random.seed(1)
    outs = [PhotoMetricDistortion()(dict(img=img.copy()))['img'] for _ in range(10)]
    assert all(o.shape == img.shape and o.dtype == np.uint8 for o in outs)
    assert any(not np.array_equal(o, img) for o in outs)
    with pytest.raises(TypeError, match='uint8'):
        PhotoMetricDistortion()(dict(img=img.astype(np.float32)))


def test_pack_seg_inputs():
    seg = np.array([[0, 1], [255, 2]], np.uint8)
    results = dict(img=np.zeros((2, 2, 3), np.uint8), gt_seg_map=seg, img_path='a.jpg',
                   seg_map_path='a.png', ori_shape=(4, 4), img_shape=np.array([2, 2]),
                   scale_factor=(0.5, 0.5), flip=False, flip_direction=None,
                   reduce_zero_label=True, other='x')
    out = PackSegInputs()(results)
    assert out['inputs'].shape == (3, 2, 2) and out['inputs'].dtype == torch.uint8
    ds = out['data_samples']
    assert ds.gt_sem_seg.data.dtype == torch.int64 and ds.gt_sem_seg.data.tolist() == [
        [[0, 1], [255, 2]]]
    assert ds.img_shape == (2, 2) and ds.ori_shape == (4, 4) and ds.seg_map_path == 'a.png'
    assert ds.reduce_zero_label is True and 'other' not in ds.metainfo


def test_ade_train_pipeline_end_to_end(tmp_path):
    """mmcv's RandomResize / RandomFlip move gt_seg_map with the image (nearest)."""
    h, w = 60, 100
    img = np.zeros((h, w, 3), np.uint8)
    img[:, 50:] = 200
    seg = np.zeros((h, w), np.uint8)
    seg[:, 50:] = 2
    seg[:, :50] = 1
    cv2.imwrite(str(tmp_path / 'a.png'), img)
    cv2.imwrite(str(tmp_path / 'a_seg.png'), seg)
    pipeline = [dict(type='LoadImage'), dict(type='LoadSegAnnotations'),
                dict(type='RandomResize', scale=(200, 50), ratio_range=(0.5, 2.0),
                     keep_ratio=True),
                dict(type='RandomCrop', crop_type='absolute', crop_size=(32, 32),
                     cat_max_ratio=0.75),
                dict(type='RandomFlip', prob=0.5), dict(type='PhotoMetricDistortion'),
                dict(type='PackSegInputs')]
    with DefaultScope.overwrite_default_scope('densevit'):
        from mmcv.transforms import Compose
        compose = Compose([TRANSFORMS.build(t) for t in pipeline])
    np.random.seed(0)
    for _ in range(5):
        out = compose(dict(img_path=str(tmp_path / 'a.png'),
                           seg_map_path=str(tmp_path / 'a_seg.png'), reduce_zero_label=True,
                           num_classes=2))
        label = out['data_samples'].gt_sem_seg.data[0]
        image = out['inputs'][0]
        # smaller than the crop when the random scale shrank the image (padded later)
        assert label.shape == image.shape and max(label.shape) <= 32
        assert set(label.unique().tolist()) <= {0, 1}  # nearest: no blended labels
        # label 1 (right half, bright) stays aligned with the bright pixels
        assert (image[label == 1].float().mean() > image[label == 0].float().mean()) or \
            len(label.unique()) == 1
