"""COCO instance masks: polygons and RLE decoded against masks written by hand, kept aligned
with their boxes by flip / resize / crop, packed as ``gt_instances.masks``, and every
malformed input refused naming the file and the annotation."""
import numpy as np
import pytest
import torch
from hand_fixtures import (
    POLYGON,
    POLYGON_MASK,
    RLE,
    RLE_MASK,
    TWO_POLYGONS,
    TWO_POLYGONS_MASK,
    ann,
    rect,
    write_instances,
)
from mmengine.registry import DefaultScope
from pycocotools import mask as mask_utils

from densevit.datasets.coco import CocoDataset
from densevit.datasets.masks import (
    compressed_rle_counts,
    masks_to_boxes,
    segmentation_to_rle,
)
from densevit.datasets.transforms.crop import RandomCrop
from densevit.datasets.transforms.formatting import PackDetInputs
from densevit.datasets.transforms.loading import DataError, LoadDetAnnotations
from densevit.registry import TRANSFORMS

# a triangle drawn pixel by pixel, stored as compressed RLE (a str, as in JSON)
TRIANGLE_MASK = np.zeros((10, 12), bool)
for row in range(5):
    TRIANGLE_MASK[row, 6:7 + row] = True
_rle = mask_utils.encode(np.asfortranarray(TRIANGLE_MASK.astype(np.uint8)))
COMPRESSED = dict(size=[10, 12], counts=_rle['counts'].decode())


def build(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return TRANSFORMS.build(cfg)


def dataset(root, pipeline=(), **kwargs):
    return CocoDataset(ann_file='ann.json', data_root=str(root), data_prefix=dict(img='imgs/'),
                       pipeline=list(pipeline), **kwargs)


def load_masks(root, **kwargs):
    info = dataset(root).get_data_info(0)
    return LoadDetAnnotations(with_mask=True, **kwargs)(dict(info, ori_shape=(10, 12)))


def test_polygons_and_rle_decode_to_the_hand_drawn_masks(tmp_path):
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON),
                               ann(2, [0, 8, 4, 2], TWO_POLYGONS),
                               ann(3, [8, 6, 2, 2], RLE, iscrowd=1),
                               ann(4, [6, 0, 5, 5], COMPRESSED)])
    out = load_masks(tmp_path)
    masks = out['gt_masks']
    assert masks.dtype == bool and masks.shape == (4, 10, 12)
    for got, want in zip(masks, [POLYGON_MASK, TWO_POLYGONS_MASK, RLE_MASK, TRIANGLE_MASK],
                         strict=True):
        np.testing.assert_array_equal(got, want)
    assert out['gt_ignore_flags'].tolist() == [False, False, True, False]
    # the masks' pixel extents are the COCO boxes, as xyxy
    np.testing.assert_array_equal(masks_to_boxes(masks), out['gt_bboxes'])


def test_compressed_counts_parse_to_the_runs():
    """Our reading of pycocotools' string encoding gives back the runs it encoded."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = rng.random((23, 17)) < rng.uniform(0.05, 0.95)
        counts = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))['counts']
        runs = compressed_rle_counts(counts)
        flat = mask.T.ravel()  # column-major
        edges = np.flatnonzero(np.diff(flat.astype(int))) + 1
        want = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
        assert runs == (want if not flat[0] else [0] + want)


@pytest.mark.parametrize('segmentation, message', [
    ([[1, 1, 5, 1, 5]], 'a polygon must be a list of x, y numbers with at least 3 points'),
    ([[1, 1, 5, 1]], 'at least 3 points'),
    ([], 'segmentation is an empty list of polygons'),
    (dict(size=[10, 11], counts=[120]), r'RLE size \[10, 11\] \(height, width\) is not its '
                                        r"image's \[10, 12\]"),
    (dict(size=[10, 12], counts=[86, 2, 8]), 'RLE counts .* are not runs covering the 10x12'),
    (dict(size=[10, 12], counts=''), 'are not runs covering'),
    (dict(size=[10, 12], counts='abc'), 'are not runs covering'),
    ('not a mask', 'segmentation must be polygons'),
])
def test_malformed_segmentation_names_file_and_annotation(tmp_path, segmentation, message):
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON), ann(7, [0, 0, 2, 2], segmentation)])
    with pytest.raises(DataError, match=f'{tmp_path}/imgs/img.png: annotation 7: .*{message}'):
        load_masks(tmp_path)
    with pytest.raises(DataError, match=message):
        segmentation_to_rle(segmentation, 10, 12, 'here')


def test_an_instance_without_segmentation_and_an_image_of_another_size(tmp_path):
    write_instances(tmp_path, [dict(id=3, image_id=1, category_id=1, bbox=[0, 0, 2, 2])])
    with pytest.raises(DataError, match='img.png: annotation 3 has no segmentation'):
        load_masks(tmp_path)
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON)])
    info = dataset(tmp_path).get_data_info(0)
    with pytest.raises(DataError, match='img.png: image is 13x10 but its annotation says 12x10'):
        LoadDetAnnotations(with_mask=True)(dict(info, ori_shape=(10, 13)))
    # without masks nothing changes: no gt_masks, no check
    assert 'gt_masks' not in LoadDetAnnotations()(dict(info, ori_shape=(10, 13)))


def test_overlapping_polygons_are_refused_when_asked(tmp_path):
    # two 4x3 rectangles sharing a 2x3 block (50% of each), and a crowd region over both
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON),
                               ann(2, [3, 1, 4, 3], [[3, 1, 7, 1, 7, 4, 3, 4]]),
                               ann(3, [0, 0, 12, 10], [[0, 0, 12, 0, 12, 10, 0, 10]], iscrowd=1)])
    assert load_masks(tmp_path)['gt_masks'].shape == (3, 10, 12)  # default: not checked
    with pytest.raises(DataError, match=r'img.png: annotation 1 and annotation 2 overlap on '
                                        r'50.0% of the smaller mask \(more than 1.0%\)'):
        load_masks(tmp_path, max_overlap=0.01)
    assert load_masks(tmp_path, max_overlap=0.5)['gt_masks'].shape == (3, 10, 12)


def mask_results():
    """Two rectangles as masks with their boxes, on a 10x12 coordinate image."""
    ys, xs = np.mgrid[0:10, 0:12]
    img = np.stack([xs, ys, np.zeros_like(xs)], -1).astype(np.uint8)
    masks = np.stack([rect((1, 4), (1, 5)), rect((5, 10), (7, 12))])
    return dict(img=img, img_shape=(10, 12), ori_shape=(10, 12), gt_masks=masks,
                gt_bboxes=masks_to_boxes(masks), gt_bboxes_labels=np.array([0, 1]),
                gt_ignore_flags=np.array([False, False]))


@pytest.mark.parametrize('direction', ['horizontal', 'vertical', 'diagonal'])
def test_flip_moves_masks_with_boxes(direction):
    out = build(dict(type='RandomFlip', prob=1.0, direction=direction))(mask_results())
    original = mask_results()['gt_masks']
    flipped = dict(horizontal=original[:, :, ::-1], vertical=original[:, ::-1, :],
                   diagonal=original[:, ::-1, ::-1])[direction]
    np.testing.assert_array_equal(out['gt_masks'], flipped)
    np.testing.assert_array_equal(masks_to_boxes(out['gt_masks']), out['gt_bboxes'])


def test_resize_moves_masks_with_boxes():
    out = build(dict(type='Resize', scale=(24, 20), keep_ratio=False))(mask_results())
    assert out['gt_masks'].shape == (2, 20, 24) and out['gt_masks'].dtype == bool
    # twice the size: every pixel becomes a 2x2 block, every box doubles
    np.testing.assert_array_equal(out['gt_masks'],
                                  mask_results()['gt_masks'].repeat(2, 1).repeat(2, 2))
    np.testing.assert_array_equal(masks_to_boxes(out['gt_masks']), out['gt_bboxes'])
    # the random resizes build this Resize, also without a default scope
    for cfg in (dict(type='RandomResize', scale=(24, 20), ratio_range=(1, 1), keep_ratio=False),
                dict(type='RandomChoiceResize', scales=[(24, 20)], keep_ratio=False)):
        assert build(cfg)(mask_results())['gt_masks'].shape == (2, 20, 24)
    from densevit.datasets.transforms.geometric import RandomResize
    resize = RandomResize(scale=(24, 20), ratio_range=(1, 1), keep_ratio=False)
    assert resize(mask_results())['gt_masks'].shape == (2, 20, 24)


def test_crop_cuts_masks_and_drops_them_with_their_boxes():
    np.random.seed(0)
    for _ in range(30):
        out = RandomCrop(crop_size=(4, 5), crop_type='absolute')(mask_results())
        x0, y0 = (int(v) for v in out['img'][0, 0, :2])  # where the window started
        window = mask_results()['gt_masks'][:, y0:y0 + 4, x0:x0 + 5]
        kept = window.reshape(2, -1).any(1)  # rectangles: a box survives iff its mask does
        np.testing.assert_array_equal(out['gt_masks'], window[kept])
        assert out['gt_bboxes_labels'].tolist() == np.array([0, 1])[kept].tolist()
        np.testing.assert_array_equal(masks_to_boxes(out['gt_masks']), out['gt_bboxes'])


def test_pack_puts_masks_in_gt_and_ignored_instances():
    res = mask_results()
    res['gt_ignore_flags'] = np.array([False, True])
    sample = PackDetInputs()(res)['data_samples']
    assert sample.gt_instances.masks.dtype == torch.bool
    assert sample.gt_instances.masks.shape == (1, 10, 12)
    assert torch.equal(sample.gt_instances.masks[0], torch.from_numpy(res['gt_masks'][0]))
    assert torch.equal(sample.ignored_instances.masks[0], torch.from_numpy(res['gt_masks'][1]))


def test_pack_refuses_masks_a_transform_left_behind():
    res = build(dict(type='Pad', size=(16, 16)))(dict(mask_results(), img_path='x.png'))
    with pytest.raises(DataError, match="x.png: gt_masks is 10x12 but the image is 16x16 .*"
                                        "mmcv's Pad"):
        PackDetInputs()(res)
    res = mask_results()
    res['gt_bboxes'] = res['gt_bboxes'][:1]
    with pytest.raises(DataError, match='2 masks for 1 boxes'):
        PackDetInputs()(res)


def test_dataset_pipeline_flips_decoded_masks(tmp_path):
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON), ann(2, [8, 6, 2, 2], RLE)])
    with DefaultScope.overwrite_default_scope('densevit'):
        ds = dataset(tmp_path, [dict(type='LoadImage'),
                                dict(type='LoadDetAnnotations', with_mask=True),
                                dict(type='RandomFlip', prob=1.0), dict(type='PackDetInputs')])
        masks = ds[0]['data_samples'].gt_instances.masks
    assert torch.equal(masks, torch.from_numpy(np.stack([POLYGON_MASK, RLE_MASK])[:, :, ::-1]
                                               .copy()))
