"""A JPEG with an EXIF orientation (user study of bad input, item 6).

The file is stored 64x32 (width x height) with Orientation=6 (shown rotated, 32x64).
The loader used to apply the rotation while the boxes stayed in the stored frame. Now
the annotation's width / height pick the frame: the stored size decodes as stored, the
rotated size applies the tag, neither is refused naming the file and the tag.
Segmentation images and label maps are both read as stored. References: the pixels
the test painted, and Pillow's own ``exif_transpose`` for the rotated frame.
"""
import json

import cv2
import numpy as np
import pytest
from mmengine.registry import DefaultScope
from PIL import Image, ImageOps

from densevit.datasets.coco import CocoDataset
from densevit.datasets.seg_folder import SegFolderDataset
from densevit.datasets.transforms.loading import DataError

BOX = [4, 6, 16, 12]  # [x, y, w, h] of the bright patch, in the stored frame
DET_PIPELINE = [dict(type='LoadImage'), dict(type='LoadDetAnnotations'),
                dict(type='PackDetInputs')]


def write_exif_jpeg(path):
    """A 64x32 JPEG, dark with a bright patch at BOX, tagged Orientation=6."""
    rgb = np.full((32, 64, 3), 30, np.uint8)
    x, y, w, h = BOX
    rgb[y:y + h, x:x + w] = 220
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(path, quality=95, exif=exif.tobytes())
    return rgb


def coco_sample(tmp_path, width, height):
    """The packed sample of one image whose annotation says ``width`` x ``height``."""
    write_exif_jpeg(tmp_path / 'photo.jpg')
    (tmp_path / 'ann.json').write_text(json.dumps(dict(
        images=[dict(id=1, file_name='photo.jpg', width=width, height=height)],
        annotations=[dict(id=1, image_id=1, category_id=1, bbox=BOX, iscrowd=0)],
        categories=[dict(id=1, name='patch')])))
    with DefaultScope.overwrite_default_scope('densevit'):
        dataset = CocoDataset(ann_file='ann.json', data_root=str(tmp_path), test_mode=True,
                              pipeline=DET_PIPELINE)
        return dataset[0]


def test_annotation_in_the_stored_frame_decodes_as_stored(tmp_path):
    """Annotation 64x32: the image is not rotated and the box covers the bright patch."""
    sample = coco_sample(tmp_path, 64, 32)
    img = sample['inputs'].numpy().transpose(1, 2, 0)  # BGR
    assert img.shape == (32, 64, 3)
    x1, y1, x2, y2 = sample['data_samples'].gt_instances.bboxes[0].int().tolist()
    assert (x1, y1, x2, y2) == (4, 6, 20, 18)
    assert img[y1 + 1:y2 - 1, x1 + 1:x2 - 1].min() > 180  # inside: the patch the test painted
    assert np.delete(img, np.s_[y1 - 2:y2 + 2], axis=0).max() < 80  # outside its rows: dark


def test_annotation_in_the_rotated_frame_applies_the_tag(tmp_path):
    """Annotation 32x64: the image is the one Pillow's exif_transpose shows."""
    img = coco_sample(tmp_path, 32, 64)['inputs'].numpy().transpose(1, 2, 0)
    with Image.open(tmp_path / 'photo.jpg') as f:
        reference = np.asarray(ImageOps.exif_transpose(f).convert('RGB'))[..., ::-1]
    assert img.shape == reference.shape == (64, 32, 3)
    assert np.abs(img.astype(int) - reference).mean() < 2  # two JPEG decoders


def test_annotation_in_neither_frame_is_refused_naming_file_and_tag(tmp_path):
    with pytest.raises(DataError) as e:
        coco_sample(tmp_path, 40, 40)
    assert str(e.value) == (
        f'{tmp_path}/photo.jpg: image is 64x32 as stored and 32x64 with its EXIF orientation '
        '6 applied, but its annotation says 40x40 (width x height): neither frame, so its '
        "boxes cannot be placed; fix the annotation's width / height or the file")


def seg_dataset(tmp_path, label_hw):
    """SegFolderDataset over the tagged JPEG and a label map of ``label_hw`` (h, w)."""
    (tmp_path / 'img').mkdir(parents=True)
    (tmp_path / 'seg').mkdir()
    write_exif_jpeg(tmp_path / 'img' / 'a.jpg')
    cv2.imwrite(str(tmp_path / 'seg' / 'a.png'), np.zeros(label_hw, np.uint8))
    with DefaultScope.overwrite_default_scope('densevit'):
        return SegFolderDataset(
            data_root=str(tmp_path), data_prefix=dict(img_path='img', seg_map_path='seg'),
            metainfo=dict(classes=('bg', 'fg')),
            pipeline=[dict(type='LoadImage'), dict(type='LoadSegAnnotations'),
                      dict(type='PackSegInputs')])


def test_segmentation_reads_image_and_label_map_as_stored(tmp_path):
    """A 32x64 (HxW) label map goes with the image as stored; one drawn on the rotated
    image (64x32) is refused, naming the tag as the cause."""
    sample = seg_dataset(tmp_path / 'stored', (32, 64))[0]
    assert sample['inputs'].shape == (3, 32, 64)
    assert sample['data_samples'].gt_sem_seg.data.shape == (1, 32, 64)
    with pytest.raises(DataError, match=r'seg/a.png is 64x32 \(HxW\) but its image .*a.jpg is '
                                        r'32x64 as stored, and the label map has its size with '
                                        r'its EXIF orientation 6 applied'):
        seg_dataset(tmp_path / 'rotated', (64, 32))[0]
