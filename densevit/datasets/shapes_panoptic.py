"""Procedural shapes as COCO panoptic segmentation: the shapes are the things, two or three
textured background regions the stuff.

Layout written by :func:`generate_shapes_panoptic` (COCO 2017 panoptic's)::

    out_dir/<split>/000000.png                        # BGR image
    out_dir/annotations/panoptic_<split>/000000.png   # segment ids as colours (id = R + 256 G + 256^2 B)
    out_dir/annotations/panoptic_<split>.json         # images, annotations (segments_info), categories
    out_dir/annotations/instances_<split>.json        # the things as COCO instances, RLE masks

Categories: circle, rectangle, triangle (ids 1-3, ``isthing`` 1) and noise, stripes,
gradient (ids 4-6, ``isthing`` 0), so labels 0-2 are things and 3-5 stuff. The
background is cut into 2 or 3 bands along a random direction with wavy borders; each
band is a different stuff class, drawn in its own texture (smooth noise, stripes, a
linear gradient) and colours. Shapes are then drawn over it as in
:mod:`densevit.datasets.shapes` (flat colours, the visible part of each is its mask).
Every pixel belongs to one segment (no VOID); a band hidden by shapes has no segment.
Segment ids are 1..n per image, the shapes first. Same ``seed`` and arguments ->
byte-identical files.
"""
import json
import os
import os.path as osp

import cv2
import numpy as np

from densevit.datasets.coco_panoptic import CocoPanopticDataset
from densevit.datasets.shapes import CATEGORIES as THING_CATEGORIES
from densevit.datasets.shapes import (
    MIN_VISIBLE,
    TEXTURES,
    background_image,
    ensure_generated_split,
    mask_to_xywh,
    render_image,
    shape_annotations,
    size_range,
    split_rng,
)
from densevit.registry import DATASETS
from densevit.structures.panoptic import id_to_rgb

STUFF_FIRST_ID = len(THING_CATEGORIES) + 1
CATEGORIES = ([dict(c, isthing=1, supercategory='shape') for c in THING_CATEGORIES]
              + [dict(id=STUFF_FIRST_ID + i, name=name, isthing=0, supercategory='texture')
                 for i, name in enumerate(TEXTURES)])
CLASSES = tuple(c['name'] for c in CATEGORIES)


def stuff_regions(rng, h, w):
    """int [H, W] band index 0..k-1 (k = 2 or 3): the image cut across a random direction
    at random quantiles (so every band holds 20-80% of the pixels between its cuts),
    the cuts waved by a sine."""
    k = int(rng.integers(2, 4))
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    along = xs * np.cos(angle) + ys * np.sin(angle)
    across = ys * np.cos(angle) - xs * np.sin(angle)
    wave = rng.uniform(0, 0.08) * min(h, w) * np.sin(
        2 * np.pi * across / (rng.uniform(0.5, 1.5) * max(h, w)) + rng.uniform(0, 2 * np.pi))
    t = along + wave
    fractions = [rng.uniform(0.3, 0.7)] if k == 2 else [rng.uniform(0.2, 0.4),
                                                         rng.uniform(0.6, 0.8)]
    return np.digitize(t, np.quantile(t, fractions))


def render_panoptic(rng, img_size, max_objects=6, min_size=8, max_size=48, inside=False,
                    min_visible=MIN_VISIBLE):
    """One image: ``img`` uint8 [H, W, 3] BGR, ``ids`` int32 [H, W] segment ids and
    ``segments`` [dict(id, category_id, mask)] (the shapes, then the stuff bands)."""
    h, w = img_size
    regions = stuff_regions(rng, h, w)
    styles = rng.permutation(len(TEXTURES))[:regions.max() + 1]
    img = np.zeros((h, w, 3), np.uint8)
    for band, style in enumerate(styles):
        inside_band = regions == band
        img[inside_band] = background_image(rng, h, w, 'texture', int(style))[inside_band]
    out = render_image(rng, img_size, max_objects, min_size, max_size, img, inside, min_visible)
    ids, segments = np.zeros((h, w), np.int32), []
    for shape in out['shapes']:
        segments.append(dict(id=len(segments) + 1, category_id=shape['category_id'],
                             mask=shape['mask']))
    for band, style in enumerate(styles):
        segments.append(dict(id=len(segments) + 1, category_id=STUFF_FIRST_ID + int(style),
                             mask=(regions == band) & (out['class_map'] == 0)))
    segments = [s for s in segments if s['mask'].any()]
    for s in segments:
        ids[s['mask']] = s['id']
    return dict(img=out['img'], ids=ids, segments=segments, shapes=out['shapes'])


def generate_shapes_panoptic(out_dir, split, num_images, img_size=(128, 128), seed=0,
                             max_objects=6, min_size=None, max_size=None, inside=False,
                             min_visible=MIN_VISIBLE):
    """Write one split (the module's layout); return the panoptic JSON's path.

    Arguments as :func:`densevit.datasets.shapes.generate_shapes` (the split name is
    mixed into the seed); the background is always the stuff bands.
    """
    h, w = img_size
    min_size, max_size = size_range(img_size, min_size, max_size)
    img_dir, ann_dir = osp.join(out_dir, split), osp.join(out_dir, 'annotations')
    png_dir = osp.join(ann_dir, f'panoptic_{split}')
    for folder in (img_dir, png_dir):
        os.makedirs(folder, exist_ok=True)
    images, panoptic, instances = [], [], []
    for idx in range(num_images):
        out = render_panoptic(split_rng(seed, split, idx), img_size, max_objects, min_size,
                              max_size, inside, min_visible)
        name = f'{idx:06d}.png'
        cv2.imwrite(osp.join(img_dir, name), out['img'])
        cv2.imwrite(osp.join(png_dir, name), id_to_rgb(out['ids'])[..., ::-1])  # RGB -> BGR
        images.append(dict(id=idx + 1, file_name=name, width=w, height=h))
        panoptic.append(dict(image_id=idx + 1, file_name=name, segments_info=[
            dict(id=s['id'], category_id=s['category_id'], iscrowd=0,
                 area=int(s['mask'].sum()), bbox=mask_to_xywh(s['mask']))
            for s in out['segments']]))
        instances += shape_annotations(out['shapes'], idx + 1, len(instances) + 1)
    with open(osp.join(ann_dir, f'instances_{split}.json'), 'w') as f:
        json.dump(dict(images=images, annotations=instances, categories=THING_CATEGORIES), f)
    ann_file = osp.join(ann_dir, f'panoptic_{split}.json')
    with open(ann_file, 'w') as f:
        json.dump(dict(images=images, annotations=panoptic, categories=CATEGORIES), f)
    return ann_file


def panoptic_outputs(split):
    """What :func:`generate_shapes_panoptic` writes besides the panoptic JSON, relative to
    its root, in the order they are renamed into place (that JSON last)."""
    return [split, osp.join('annotations', f'panoptic_{split}'),
            osp.join('annotations', f'instances_{split}.json')]


def ensure_shapes_panoptic_split(ann_file, img_dir=None, seg_dir=None, **generate):
    """Generate the split behind ``ann_file`` (``<root>/annotations/panoptic_<split>.json``,
    images in ``<root>/<split>/``, PNGs in ``<root>/annotations/panoptic_<split>/``) once,
    safely across processes (:func:`densevit.datasets.shapes.ensure_generated_split`)."""
    ensure_generated_split(
        ann_file, 'panoptic', generate_shapes_panoptic, panoptic_outputs,
        [('img', img_dir, lambda split: split),
         ('seg', seg_dir, lambda split: osp.join('annotations', f'panoptic_{split}'))],
        **generate)


@DATASETS.register_module()
class ShapesPanopticDataset(CocoPanopticDataset):
    """:class:`CocoPanopticDataset` over procedural shapes, generated on first use.

    Args:
        generate (dict, optional): arguments of :func:`generate_shapes_panoptic` except
            ``out_dir`` / ``split`` (``num_images`` required), used when ``ann_file`` does
            not exist. ``ann_file`` must then be ``<root>/annotations/panoptic_<split>.json``,
            ``data_prefix`` ``dict(img='<root>/<split>/',
            seg='<root>/annotations/panoptic_<split>/')``. None: never generate.
        **kwargs: as :class:`CocoPanopticDataset`.
    """

    METAINFO = dict(classes=CLASSES, thing_classes=CLASSES[:len(THING_CATEGORIES)],
                    stuff_classes=CLASSES[len(THING_CATEGORIES):])

    def __init__(self, *args, generate=None, **kwargs):
        self.generate = generate
        super().__init__(*args, **kwargs)

    def load_data_list(self):
        if self.generate is not None:
            ensure_shapes_panoptic_split(self.ann_file, self.data_prefix.get('img') or None,
                                         self.data_prefix.get('seg') or None, **self.generate)
        return super().load_data_list()
