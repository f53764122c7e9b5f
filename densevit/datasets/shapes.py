"""Procedural shapes: circles, rectangles and triangles on textured backgrounds, in COCO format.

A detection data set that needs no download, renders in seconds and is
deterministic: the same ``seed`` gives byte-identical PNGs and JSON. Layout
written by :func:`generate_shapes` (the layout COCO itself uses)::

    out_dir/<split>/000000.png ...
    out_dir/annotations/instances_<split>.json

Rendering draws every shape as an exact (not anti-aliased) boolean mask, then
composites the masks back to front, so each pixel belongs to exactly one shape
or to the background. A box is the extent of the *visible* mask, and each annotation's
``segmentation`` is that mask as COCO compressed RLE (exact; the masks of one image never
overlap); the same masks give a per-pixel class map (``render_image(...)['class_map']``)
for segmentation and the panoptic set of :mod:`densevit.datasets.shapes_panoptic`.
"""
import json
import logging
import os
import os.path as osp
import zlib

import cv2
import numpy as np
from mmengine.logging import print_log
from pycocotools import mask as mask_utils

from densevit.datasets.coco import CocoDataset
from densevit.datasets.generated import generate_once
from densevit.registry import DATASETS

CATEGORIES = [dict(id=1, name='circle'), dict(id=2, name='rectangle'), dict(id=3, name='triangle')]
MIN_VISIBLE = 0.5  # a new shape may hide at most half of any shape already drawn
PLACEMENT_TRIES = 10


TEXTURES = ('noise', 'stripes', 'gradient')  # the styles of a 'texture' background


def background_image(rng, h, w, kind, style=None):
    """A [H, W, 3] uint8 BGR background: smooth noise, stripes or a gradient (or flat).

    ``style``: the index in :data:`TEXTURES` of the texture; None draws one."""
    c0, c1 = rng.integers(0, 256, size=(2, 3)).astype(np.float32)
    if kind == 'flat':
        return np.broadcast_to(c0.astype(np.uint8), (h, w, 3)).copy()
    style = rng.integers(3) if style is None else style
    if style == 0:  # smooth noise: a coarse random grid upsampled bicubically
        grid = rng.random((int(rng.integers(3, 9)), int(rng.integers(3, 9))), dtype=np.float32)
        t = np.clip(cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC), 0, 1)
    else:
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
        angle = rng.uniform(0, np.pi)
        proj = xs * np.cos(angle) + ys * np.sin(angle)
        if style == 1:  # stripes
            period = rng.uniform(6, max(7, min(h, w) / 3))
            t = 0.5 + 0.5 * np.sin(2 * np.pi * proj / period + rng.uniform(0, 2 * np.pi))
        else:  # linear gradient
            t = (proj - proj.min()) / max(proj.max() - proj.min(), 1e-6)
    img = c0 + t[..., None] * (c1 - c0)
    img += rng.normal(0, 6, size=img.shape).astype(np.float32)  # grain, so no region is flat
    return np.clip(img, 0, 255).astype(np.uint8)


def _shape_mask(rng, category_id, h, w, min_size, max_size, inside=False):
    """Boolean [H, W] mask of one shape of about ``size`` pixels, centred inside the image.

    ``inside``: the centre is at least ``size // 2`` from every border, so the shape
    lies inside the image (a triangle vertex may round one pixel over); sizes are
    capped at ``min(H, W) - 1``. Else the border may cut the shape.
    """
    mask = np.zeros((h, w), np.uint8)
    size = int(rng.integers(min_size, min(max_size, h - 1, w - 1) + 1 if inside else max_size + 1))
    r = size // 2 if inside else 0  # circles and rectangles fit in a circle of diameter ``size``
    cx, cy = int(rng.integers(r, w - r)), int(rng.integers(r, h - r))
    if category_id == 1:
        cv2.circle(mask, (cx, cy), max(size // 2, 1), 1, thickness=-1, lineType=cv2.LINE_8)
    elif category_id == 2:
        rw, rh = size, max(int(size * rng.uniform(0.4, 1.0)), 2)
        if rng.random() < 0.5:
            rw, rh = rh, rw
        cv2.rectangle(mask, (cx - rw // 2, cy - rh // 2), (cx + (rw - 1) // 2, cy + (rh - 1) // 2),
                      1, thickness=-1, lineType=cv2.LINE_8)
    else:
        # vertices roughly evenly spread on a circle: jitter keeps triangles varied but not slivers
        angles = (rng.uniform(0, 2 * np.pi) + np.arange(3) * 2 * np.pi / 3
                  + rng.uniform(-0.4, 0.4, 3))
        pts = np.stack([cx + size / 2 * np.cos(angles), cy + size / 2 * np.sin(angles)], axis=1)
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1, lineType=cv2.LINE_8)
    return mask.astype(bool)


def _contrasting_colour(rng, under):
    """A random BGR colour far (in L2) from the mean colour of the pixels it covers."""
    for _ in range(20):
        colour = rng.integers(0, 256, size=3)
        if np.linalg.norm(colour - under) >= 100:
            break
    return colour.astype(np.uint8)


def render_image(rng, img_size, max_objects=6, min_size=8, max_size=48, background='texture',
                 inside=False, min_visible=MIN_VISIBLE):
    """Render one image.

    Args:
        rng (np.random.Generator): the only source of randomness.
        img_size (tuple[int, int]): (H, W).
        background (str | np.ndarray): 'texture' (noise / stripes / gradient), 'flat'
            (one colour), or a uint8 [H, W, 3] BGR image to draw on (not modified).
        inside (bool): keep every shape whole inside the image (else the border may cut it).
        min_visible (float): a new shape may hide at most ``1 - min_visible`` of any
            shape already drawn (1.0: shapes never overlap).

    Returns:
        dict: ``img`` uint8 [H, W, 3] BGR; ``class_map`` uint8 [H, W] category id per
        pixel (0 = background); ``shapes``: list of dict(category_id, mask=bool [H, W]
        visible pixels), back to front, every mask non-empty.
    """
    h, w = img_size
    if inside and min_size > min(h, w) - 1:
        raise ValueError(f'shapes with inside=True: min_size {min_size} does not fit a '
                         f'{h}x{w} image (at most {min(h, w) - 1})')
    img = (background.copy() if isinstance(background, np.ndarray)
           else background_image(rng, h, w, background))
    owner = np.zeros((h, w), np.uint8)  # index + 1 of the shape on top, 0 = background
    shapes = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _ in range(PLACEMENT_TRIES):
            category_id = int(rng.integers(1, len(CATEGORIES) + 1))
            mask = _shape_mask(rng, category_id, h, w, min_size, max_size, inside)
            # overlaps are allowed, but every earlier shape must stay mostly visible
            if mask.any() and all(
                    np.count_nonzero((owner == i + 1) & ~mask) >= min_visible * s['area']
                    for i, s in enumerate(shapes)):
                break
        else:
            continue
        img[mask] = _contrasting_colour(rng, img[mask].reshape(-1, 3).mean(0))
        owner[mask] = len(shapes) + 1
        shapes.append(dict(category_id=category_id, area=int(mask.sum())))
    lut = np.array([0] + [s['category_id'] for s in shapes], np.uint8)
    for i, s in enumerate(shapes):
        s['mask'] = owner == i + 1
        del s['area']
    shapes = [s for s in shapes if s['mask'].any()]
    return dict(img=img, class_map=lut[owner], shapes=shapes)


def mask_to_xywh(mask):
    """Tight COCO box [x, y, w, h] (pixel-extent: a single pixel is 1x1) of a non-empty mask."""
    ys, xs = np.nonzero(mask)
    x0, y0 = int(xs.min()), int(ys.min())
    return [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0]


def mask_to_rle(mask):
    """A bool [H, W] mask as COCO's compressed RLE, JSON-ready (``counts`` a str)."""
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return dict(size=[int(v) for v in rle['size']], counts=rle['counts'].decode('ascii'))


def shape_annotations(shapes, image_id, first_id):
    """COCO instance annotations of one image's rendered shapes (visible masks, so the
    masks of one image never overlap), numbered from ``first_id``."""
    return [dict(id=first_id + k, image_id=image_id, category_id=shape['category_id'],
                 bbox=mask_to_xywh(shape['mask']), area=int(shape['mask'].sum()), iscrowd=0,
                 segmentation=mask_to_rle(shape['mask']))
            for k, shape in enumerate(shapes)]


def split_rng(seed, split, idx):
    """The generator of image ``idx`` of ``split``: one per image, so any image can be
    re-rendered alone; the split name is mixed in (crc32: stable across processes,
    unlike hash()), so train and val of one ``seed`` differ."""
    return np.random.default_rng([seed, zlib.crc32(split.encode()), idx])


def size_range(img_size, min_size, max_size):
    """The (min_size, max_size) of shape diameters: by default ``min(H, W) // 10`` (at
    least 6) and ``min(H, W) // 2``."""
    min_size = min_size or max(min(img_size) // 10, 6)
    return min_size, max(max_size or min(img_size) // 2, min_size)


def generate_shapes(out_dir, split, num_images, img_size=(128, 128), seed=0, max_objects=6,
                    min_size=None, max_size=None, background='texture', inside=False,
                    min_visible=MIN_VISIBLE):
    """Write one split of the shapes data set in COCO format; return the annotation file path.

    Args:
        out_dir (str): root; writes ``<split>/NNNNNN.png`` and
            ``annotations/instances_<split>.json``.
        split (str): split name, e.g. 'train'. It is mixed into the seed, so train and
            val generated with the same ``seed`` still differ.
        num_images (int): number of images.
        img_size (tuple[int, int]): (H, W) of every image.
        seed (int): same seed (and arguments) -> byte-identical output.
        max_objects (int): 1..max_objects shapes are placed per image (fewer if they do not fit).
        min_size, max_size (int, optional): shape diameter range in pixels; default to
            ``min(H, W) // 10`` (at least 6) and ``min(H, W) // 2``.
        background (str): 'texture' or 'flat'.
        inside, min_visible: as :func:`render_image`.
    """
    h, w = img_size
    min_size, max_size = size_range(img_size, min_size, max_size)
    img_dir, ann_dir = osp.join(out_dir, split), osp.join(out_dir, 'annotations')
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(ann_dir, exist_ok=True)
    images, annotations = [], []
    for idx in range(num_images):
        out = render_image(split_rng(seed, split, idx), img_size, max_objects, min_size,
                           max_size, background, inside, min_visible)
        file_name = f'{idx:06d}.png'
        cv2.imwrite(osp.join(img_dir, file_name), out['img'])
        images.append(dict(id=idx + 1, file_name=file_name, width=w, height=h))
        annotations += shape_annotations(out['shapes'], idx + 1, len(annotations) + 1)
    ann_file = osp.join(ann_dir, f'instances_{split}.json')
    with open(ann_file, 'w') as f:
        json.dump(dict(images=images, annotations=annotations, categories=CATEGORIES), f)
    return ann_file


def ensure_generated_split(ann_file, kind, write, outputs, prefixes=(), **generate):
    """Generate the split behind ``ann_file`` (``<root>/annotations/<kind>_<split>.json``)
    once, for every generated COCO-layout set.

    Safe when several processes (torchrun ranks) call it at once: one generates
    into a temporary folder under ``<root>`` and renames the result into place,
    the annotation file last (its presence means "complete"); the others wait
    on a lock and then find the file.

    Args:
        kind (str): 'instances' or 'panoptic', the annotation file's prefix.
        write (callable): ``write(out_dir, split, **generate)`` writes the split.
        outputs (callable): ``outputs(split)``: what ``write`` makes besides ``ann_file``,
            paths relative to ``<root>``, renamed into place in this order.
        prefixes (tuple): ``(data_prefix key, given folder or None, expected folder
            relative to <root> as a function of split)``; a given folder elsewhere
            is a ValueError.
    """
    ann_dir, name = osp.split(osp.abspath(ann_file))
    root = osp.dirname(ann_dir)
    if (not (name.startswith(f'{kind}_') and name.endswith('.json'))
            or osp.basename(ann_dir) != 'annotations'):
        raise ValueError(f'cannot generate {ann_file}: a shapes {kind} annotation file must be '
                         f'<root>/annotations/{kind}_<split>.json')
    split = name[len(kind) + 1:-len('.json')]
    for key, given, expected in prefixes:
        expected = osp.join(root, expected(split))
        if given is not None and osp.abspath(given) != expected:
            raise ValueError(f'shapes split {split!r} writes data_prefix {key!r} to {expected}, '
                             f'but data_prefix points at {given}')
    os.makedirs(ann_dir, exist_ok=True)
    places = [(rel, osp.join(root, rel)) for rel in outputs(split)]
    generated = generate_once(
        root, split, lambda tmp: write(tmp, split, **generate),
        places=places + [(osp.join('annotations', name), osp.join(ann_dir, name))],
        generate=generate, record_file=osp.join(ann_dir, f'.{name}.generate'),
        lock_file=osp.join(ann_dir, f'.{name}.lock'))
    if generated:  # else generated earlier, or by another process while we waited
        print_log(f'generated shapes {kind} split {split!r}: {ann_file}', logger='current',
                  level=logging.INFO)


def ensure_shapes_split(ann_file, img_dir=None, **generate):
    """Generate the detection split behind ``ann_file``
    (``<root>/annotations/instances_<split>.json``, images in ``<root>/<split>/``) once,
    safely across processes (:func:`ensure_generated_split`)."""
    ensure_generated_split(ann_file, 'instances', generate_shapes, lambda split: [split],
                           [('img', img_dir, lambda split: split)], **generate)


@DATASETS.register_module()
class ShapesDataset(CocoDataset):
    """:class:`CocoDataset` over procedural shapes, generated on first use.

    Args:
        generate (dict, optional): arguments of :func:`generate_shapes` except
            ``out_dir`` / ``split`` (``num_images`` required), used when ``ann_file``
            does not exist. ``ann_file`` must then be ``<root>/annotations/instances_<split>.json``
            and ``data_prefix['img']`` ``<root>/<split>/``. None: never generate.
        **kwargs: as :class:`CocoDataset`.
    """

    def __init__(self, *args, generate=None, **kwargs):
        self.generate = generate
        super().__init__(*args, **kwargs)

    def load_data_list(self):
        if self.generate is not None:
            ensure_shapes_split(self.ann_file, self.data_prefix.get('img') or None, **self.generate)
        return super().load_data_list()
