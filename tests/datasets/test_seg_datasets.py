"""SegFolderDataset / ADE20KDataset on tiny fixtures, ShapesSegDataset generation."""
import os

import cv2
import numpy as np
import pytest
from mmengine.registry import DefaultScope

from densevit.datasets.ade import CLASSES, PALETTE, ADE20KDataset
from densevit.datasets.seg_folder import SegFolderDataset
from densevit.datasets.shapes_seg import ShapesSegDataset, generate_shapes_seg

SEG_PIPELINE = [dict(type='LoadImage'), dict(type='LoadSegAnnotations'),
                dict(type='PackSegInputs')]


def write_ade(root, split='training', labels=None, names=('ADE_a', 'ADE_b'), size=(6, 8)):
    """Tiny ADE layout: images/<split>/*.jpg and annotations/<split>/*.png."""
    img_dir, seg_dir = root / 'images' / split, root / 'annotations' / split
    img_dir.mkdir(parents=True, exist_ok=True)
    seg_dir.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        cv2.imwrite(str(img_dir / f'{name}.jpg'), np.full((*size, 3), 40 * i, np.uint8))
        seg = labels if labels is not None else np.arange(size[0] * size[1]).reshape(size) % 151
        cv2.imwrite(str(seg_dir / f'{name}.png'), seg.astype(np.uint8))
    return img_dir, seg_dir


def ade(root, split='training', **kwargs):
    with DefaultScope.overwrite_default_scope('densevit'):
        return ADE20KDataset(
            data_root=str(root),
            data_prefix=dict(img_path=f'images/{split}', seg_map_path=f'annotations/{split}'),
            pipeline=SEG_PIPELINE, **kwargs)


def test_ade_metainfo():
    assert len(CLASSES) == len(set(CLASSES)) == len(PALETTE) == 150
    assert CLASSES[:3] == ('wall', 'building', 'sky') and CLASSES[-1] == 'flag'
    assert PALETTE[0] == [120, 120, 120] and PALETTE[-1] == [92, 0, 255]


def test_ade_layout_and_reduce_zero_label(tmp_path):
    labels = np.array([[0, 1, 2, 150], [255, 3, 0, 1]], np.uint8)
    write_ade(tmp_path, labels=labels, size=(2, 4))
    ds = ade(tmp_path)
    assert len(ds) == 2 and ds.metainfo['classes'] == CLASSES
    info = ds.get_data_info(0)
    assert info['img_path'].endswith(os.path.join('images', 'training', 'ADE_a.jpg'))
    assert info['seg_map_path'].endswith(os.path.join('annotations', 'training', 'ADE_a.png'))
    assert info['reduce_zero_label'] is True and info['num_classes'] == 150
    sample = ds[0]['data_samples']
    seg = sample.gt_sem_seg.data[0].numpy()
    # 0 -> 255 (ignored), c -> c - 1, 255 stays ignored
    assert seg.tolist() == [[255, 0, 1, 149], [255, 2, 255, 0]]
    assert sample.reduce_zero_label is True and sample.ori_shape == (2, 4)


def test_ade_classes_are_fixed(tmp_path):
    write_ade(tmp_path)
    with pytest.raises(ValueError, match='fixed classes'):
        ade(tmp_path, metainfo=dict(classes=('a', 'b')))


def test_missing_folder_names_it_and_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'image folder not found.*images/training.*'
                                                r'annotations/<split>'):
        ade(tmp_path)


def test_images_without_label_maps_are_counted_and_named(tmp_path):
    _, seg_dir = write_ade(tmp_path, names=('a', 'b', 'c', 'd', 'e', 'f', 'g'))
    for name in ('b', 'c', 'd', 'e', 'f', 'g'):
        (seg_dir / f'{name}.png').unlink()
    with pytest.raises(FileNotFoundError,
                       match=r'6 of 7 images .* have no label map.*first: b.jpg, c.jpg, d.jpg, '
                             r'e.jpg, f.jpg$'):
        ade(tmp_path)


def test_seg_folder_needs_classes_and_reads_split_files(tmp_path):
    write_ade(tmp_path, names=('x', 'y', 'z'))
    prefix = dict(img_path='images/training', seg_map_path='annotations/training')
    with pytest.raises(ValueError, match='needs metainfo=dict\\(classes'):
        SegFolderDataset(data_root=str(tmp_path), data_prefix=prefix)
    (tmp_path / 'split.txt').write_text('z\nx\n')
    ds = SegFolderDataset(data_root=str(tmp_path), data_prefix=prefix, ann_file='split.txt',
                          metainfo=dict(classes=('a', 'b')))
    assert [os.path.basename(d['img_path']) for d in ds] == ['z.jpg', 'x.jpg']
    assert ds.metainfo['reduce_zero_label'] is False


def test_label_out_of_range_is_an_error_naming_file_and_values(tmp_path):
    write_ade(tmp_path, labels=np.array([[0, 5, 7, 255]], np.uint8), size=(1, 4))
    prefix = dict(img_path='images/training', seg_map_path='annotations/training')
    with DefaultScope.overwrite_default_scope('densevit'):
        ds = SegFolderDataset(data_root=str(tmp_path), data_prefix=prefix, img_suffix='.jpg',
                              metainfo=dict(classes=('a', 'b', 'c', 'd', 'e')),
                              pipeline=SEG_PIPELINE)
        with pytest.raises(ValueError, match=r'ADE_a.png has values 5, 7 outside 0..4'):
            ds[0]
        ds_ignore = SegFolderDataset(data_root=str(tmp_path), data_prefix=prefix,
                                     metainfo=dict(classes=('a', 'b', 'c', 'd', 'e')),
                                     pipeline=[dict(type='LoadImage'),
                                               dict(type='LoadSegAnnotations',
                                                    invalid_label='ignore'),
                                               dict(type='PackSegInputs')])
        assert ds_ignore[0]['data_samples'].gt_sem_seg.data.tolist() == [[[0, 255, 255, 255]]]


def test_label_size_mismatch_names_both_files(tmp_path):
    img_dir, seg_dir = write_ade(tmp_path, size=(6, 8))
    cv2.imwrite(str(seg_dir / 'ADE_a.png'), np.zeros((6, 7), np.uint8))
    with pytest.raises(ValueError, match=r'ADE_a.png is 6x7 .* image .*ADE_a.jpg is 6x8'):
        ade(tmp_path)[0]


def test_generate_shapes_seg_is_deterministic(tmp_path):
    a = generate_shapes_seg(str(tmp_path / 'a'), 'training', 3, img_size=(32, 40), seed=4)
    b = generate_shapes_seg(str(tmp_path / 'b'), 'training', 3, img_size=(32, 40), seed=4)
    for name in sorted(os.listdir(a[0])):
        for da, db in zip(a, b, strict=True):
            assert (open(os.path.join(da, name), 'rb').read()
                    == open(os.path.join(db, name), 'rb').read())
    seg = cv2.imread(os.path.join(a[1], '000000.png'), cv2.IMREAD_UNCHANGED)
    assert seg.shape == (32, 40) and seg.dtype == np.uint8 and set(np.unique(seg)) <= {0, 1, 2, 3}


def test_shapes_seg_dataset_generates_once_on_first_use(tmp_path):
    kwargs = dict(data_root=str(tmp_path),
                  data_prefix=dict(img_path='images/validation',
                                   seg_map_path='annotations/validation'),
                  generate=dict(num_images=3, img_size=(24, 24), seed=1), pipeline=SEG_PIPELINE)
    with DefaultScope.overwrite_default_scope('densevit'):
        ds = ShapesSegDataset(**kwargs)
        assert len(ds) == 3
        assert ds.metainfo['classes'] == ('background', 'circle', 'rectangle', 'triangle')
        out = ds[0]
        assert out['inputs'].shape == (3, 24, 24)
        assert out['data_samples'].gt_sem_seg.data.max() <= 3
        stamp = os.path.getmtime(tmp_path / 'annotations' / 'validation' / '000000.png')
        assert len(ShapesSegDataset(**kwargs)) == 3  # found, not regenerated
        assert os.path.getmtime(tmp_path / 'annotations' / 'validation' / '000000.png') == stamp
        # a config asking for other images must not silently get the old ones
        with pytest.raises(ValueError, match=r"annotations/validation was generated with.*"
                                             r"num_images: 3 -> 4.*delete"):
            ShapesSegDataset(**dict(kwargs, generate=dict(num_images=4, img_size=(24, 24), seed=1)))
    with pytest.raises(ValueError, match='must be <root>/images/<split>'):
        ShapesSegDataset(**dict(kwargs, pipeline=[], data_prefix=dict(
            img_path='imgs/val', seg_map_path='annotations/val')))
