"""Instance masks: COCO segmentations (polygons, RLE) decoded through pycocotools, and the
bitmap masks the pipeline carries.

Representation: one bitmap per instance. Through the pipeline ``results['gt_masks']``
is a numpy bool array [N, H, W] whose rows follow ``gt_bboxes``; after packing it is
``gt_instances.masks`` (torch bool [N, H, W]). Bitmaps rather than polygons or RLE,
because every geometric transform then moves a mask as it moves the image (the same
flip, the same nearest-neighbour resize, the same window), and the transforms stay a
few lines each; the price is N x H x W bytes per image (COCO: about 7 instances of
800 x 1333, some 7.5 MB, freed after packing).

A COCO ``segmentation`` is one of:

- polygons: a list of ``[x1, y1, x2, y2, ...]`` lists (at least 3 points each), in
  pixels of the image, rasterised by pycocotools (a pixel (i, j) is the square
  ``[j, j + 1) x [i, i + 1)``, so a rectangle ``[x0, x1] x [y0, y1]`` covers columns
  ``x0 .. x1 - 1``);
- uncompressed RLE: ``dict(size=[h, w], counts=[n0, n1, ...])``, alternating runs of
  0 and 1 in column-major order starting with 0 (COCO's crowd regions);
- compressed RLE: the same with ``counts`` a string (pycocotools' encoding).

Malformed input is refused with a :class:`DataError` naming where it came from
(``where``: the file and annotation): a polygon of fewer than 3 points or an odd number
of coordinates, an RLE whose size is not the image's or whose runs do not add up to
``h * w`` (pycocotools would read past the runs and return garbage).
"""
import numbers

import numpy as np
from pycocotools import mask as mask_utils

from densevit.datasets.transforms.loading import DataError

SHOWN = 60  # characters of a bad value quoted in an error


def _short(value):
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + '...'


def compressed_rle_counts(counts):
    """The runs of a compressed COCO RLE string (pycocotools' encoding: 6-bit groups
    offset by 48, 5 payload bits and a continuation bit, sign-extended; from the third
    run on, each run is stored as its difference to the run two before). None when the
    string is not a valid encoding."""
    data = counts.encode() if isinstance(counts, str) else bytes(counts)
    runs, pos = [], 0
    while pos < len(data):
        value, shift, more = 0, 0, True
        while more:
            if pos >= len(data) or not 48 <= data[pos] < 48 + 64:
                return None  # truncated in the middle of a run, or a character out of range
            group = data[pos] - 48
            value |= (group & 0x1F) << shift
            more = bool(group & 0x20)
            pos, shift = pos + 1, shift + 5
            if not more and group & 0x10:
                value -= 1 << shift  # negative: sign-extend
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def segmentation_to_rle(segm, height, width, where):
    """A COCO ``segmentation`` (polygons or RLE) -> one compressed RLE of a ``height`` x
    ``width`` image; DataError naming ``where`` when it is malformed."""
    if isinstance(segm, list):
        if not segm:
            raise DataError(f'{where}: segmentation is an empty list of polygons')
        for poly in segm:
            if (not isinstance(poly, list) or len(poly) < 6 or len(poly) % 2
                    or not all(isinstance(v, numbers.Real) and np.isfinite(v) for v in poly)):
                raise DataError(f'{where}: a polygon must be a list of x, y numbers with at '
                                f'least 3 points, got {_short(poly)}')
        return mask_utils.merge(mask_utils.frPyObjects(segm, height, width))
    if not (isinstance(segm, dict) and 'counts' in segm and 'size' in segm):
        raise DataError(f'{where}: segmentation must be polygons (a list of [x1, y1, x2, y2, '
                        f'...] lists) or an RLE dict with "size" and "counts", got {_short(segm)}')
    size, counts = list(segm['size']), segm['counts']
    if size != [height, width]:
        raise DataError(f'{where}: RLE size {size} (height, width) is not its image\'s '
                        f'[{height}, {width}]')
    compressed = isinstance(counts, (str, bytes))
    runs = compressed_rle_counts(counts) if compressed else counts
    if (not isinstance(runs, list) or not all(isinstance(n, numbers.Integral) for n in runs)
            or any(n < 0 for n in runs) or sum(runs) != height * width):
        raise DataError(f'{where}: RLE counts {_short(counts)} are not runs covering the '
                        f'{height}x{width} image ({height * width} pixels)')
    if compressed:
        return dict(size=size, counts=counts.encode() if isinstance(counts, str) else counts)
    return mask_utils.frPyObjects(dict(size=size, counts=list(runs)), height, width)


def polygon_outside(segm, height, width):
    """How far (pixels) the furthest polygon vertex lies outside the ``width`` x ``height``
    image (0 inside, or for RLE: an RLE is checked by its size)."""
    if not isinstance(segm, list):
        return 0.0
    worst = 0.0
    for poly in segm:
        xy = np.asarray(poly, np.float64).reshape(-1, 2)
        over = np.maximum(np.maximum(-xy, xy - [width, height]), 0)
        worst = max(worst, float(over.max(initial=0.0)))
    return worst


def decode_rles(rles, height, width):
    """Compressed RLEs -> bool [N, height, width] (C-contiguous)."""
    if not rles:
        return np.zeros((0, height, width), bool)
    return np.ascontiguousarray(mask_utils.decode(list(rles)).transpose(2, 0, 1).astype(bool))


def mask_overlaps(rles):
    """[N, N] fraction of the smaller mask that two masks share (0 on the diagonal and
    between empty masks)."""
    n = len(rles)
    if n < 2:
        return np.zeros((n, n))
    areas = mask_utils.area(list(rles)).astype(np.float64)
    iou = np.asarray(mask_utils.iou(list(rles), list(rles), [0] * n), np.float64)
    inter = iou * (areas[:, None] + areas[None, :]) / (1 + iou)
    smaller = np.minimum(areas[:, None], areas[None, :])
    out = np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)
    np.fill_diagonal(out, 0)
    return out


def overlap_problems(rles, names, max_overlap):
    """One line per pair of masks sharing more than ``max_overlap`` of the smaller one:
    ``names[i]`` says which annotation mask ``i`` is."""
    frac = mask_overlaps(rles)
    return [f'{names[i]} and {names[j]} overlap on {frac[i, j]:.1%} of the smaller mask '
            f'(more than {max_overlap:.1%})'
            for i, j in zip(*np.nonzero(np.triu(frac > max_overlap)), strict=True)]


def masks_to_boxes(masks):
    """bool [N, H, W] -> float32 [N, 4] xyxy pixel extents (a single pixel (i, j) is
    ``[j, i, j + 1, i + 1]``); an empty mask gives zeros."""
    boxes = np.zeros((len(masks), 4), np.float32)
    for k, mask in enumerate(masks):
        cols, rows = np.flatnonzero(mask.any(0)), np.flatnonzero(mask.any(1))
        if len(cols):
            boxes[k] = cols[0], rows[0], cols[-1] + 1, rows[-1] + 1
    return boxes


def flip_masks(masks, direction):
    """Flip bool [N, H, W] as mmcv flips an image ('horizontal', 'vertical', 'diagonal')."""
    axes = dict(horizontal=(2,), vertical=(1,), diagonal=(1, 2))[direction]
    return np.ascontiguousarray(np.flip(masks, axes))


def annotation_size(results):
    """(height, width) that the masks of ``results`` are drawn at: the annotation's, which
    must be the loaded image's (``ori_shape``) when both are known."""
    path = results.get('img_path', 'an image')
    shape = results.get('ori_shape')
    size = results.get('height'), results.get('width')
    if None in size:
        if shape is None:
            raise DataError(f'{path}: neither the annotation\'s height / width nor the image '
                            'size is known, so its masks cannot be drawn')
        return tuple(shape[:2])
    if shape is not None and tuple(shape[:2]) != size:
        raise DataError(f'{path}: image is {shape[1]}x{shape[0]} but its annotation says '
                        f'{size[1]}x{size[0]} (width x height), so its masks do not fit it')
    return size


def instance_rles(results, problems=None):
    """(compressed RLEs, names) of ``results['instances']``, one per instance.

    An instance without a ``mask`` (the COCO ``segmentation``) or with a malformed one
    raises :class:`DataError` naming the file and the annotation; with ``problems`` (a
    list) its line goes there instead and its RLE is None.
    """
    path = results.get('img_path', 'an image')
    height, width = annotation_size(results)
    rles, names = [], []
    for k, inst in enumerate(results.get('instances', [])):
        names.append(f'annotation {inst.get("ann_id", f"#{k}")}')
        where = f'{path}: {names[-1]}'
        try:
            if inst.get('mask') is None:
                raise DataError(f'{where} has no segmentation (with_mask=True needs one per box)')
            rles.append(segmentation_to_rle(inst['mask'], height, width, where))
        except DataError as e:
            if problems is None:
                raise
            problems.append(str(e))
            rles.append(None)
    return rles, names


def check_overlaps(results, rles, names, max_overlap):
    """Lines naming the file for each pair of non-ignored masks sharing more than
    ``max_overlap`` of the smaller one (skipping RLEs that are None)."""
    kept = [k for k, inst in enumerate(results.get('instances', []))
            if rles[k] is not None and not inst.get('ignore_flag', 0)]
    path = results.get('img_path', 'an image')
    return [f'{path}: {line}' for line in overlap_problems(
        [rles[k] for k in kept], [names[k] for k in kept], max_overlap)]


def load_instance_masks(results, max_overlap=None):
    """bool [N, H, W] masks of ``results['instances']`` (LoadDetAnnotations(with_mask=True))."""
    rles, names = instance_rles(results)
    if max_overlap is not None:
        overlaps = check_overlaps(results, rles, names, max_overlap)
        if overlaps:
            raise DataError('; '.join(overlaps) + ' (LoadDetAnnotations max_overlap)')
    return decode_rles(rles, *annotation_size(results))
