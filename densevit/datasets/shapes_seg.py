"""Procedural shapes as semantic segmentation, in the ADE20K folder layout.

The images of :mod:`densevit.datasets.shapes` with their per-pixel class maps::

    out_dir/images/<split>/000000.png        # BGR image (PNG: lossless)
    out_dir/annotations/<split>/000000.png   # uint8 class map: 0 background,
                                             # 1 circle, 2 rectangle, 3 triangle

Labels are used as they are (``reduce_zero_label=False``): 4 classes, background
included. Same ``seed`` and arguments -> byte-identical files.
"""
import logging
import os
import os.path as osp

import cv2
from mmengine.logging import print_log

from densevit.datasets.generated import generate_once
from densevit.datasets.seg_folder import SegFolderDataset
from densevit.datasets.shapes import MIN_VISIBLE, render_image, size_range, split_rng
from densevit.registry import DATASETS

CLASSES = ('background', 'circle', 'rectangle', 'triangle')
PALETTE = [[0, 0, 0], [230, 25, 75], [60, 180, 75], [0, 130, 200]]


def generate_shapes_seg(out_dir, split, num_images, img_size=(128, 128), seed=0, max_objects=6,
                        min_size=None, max_size=None, background='texture', inside=False,
                        min_visible=MIN_VISIBLE):
    """Write one split: ``images/<split>/*.png`` and ``annotations/<split>/*.png``.

    Arguments as :func:`densevit.datasets.shapes.generate_shapes` (the split name is
    mixed into the seed). Returns ``(img_dir, seg_dir)``.
    """
    min_size, max_size = size_range(img_size, min_size, max_size)
    img_dir, seg_dir = osp.join(out_dir, 'images', split), osp.join(out_dir, 'annotations', split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(seg_dir, exist_ok=True)
    for idx in range(num_images):
        out = render_image(split_rng(seed, split, idx), img_size, max_objects, min_size,
                           max_size, background, inside, min_visible)
        cv2.imwrite(osp.join(img_dir, f'{idx:06d}.png'), out['img'])
        cv2.imwrite(osp.join(seg_dir, f'{idx:06d}.png'), out['class_map'])
    return img_dir, seg_dir


def ensure_shapes_seg_split(root, split, **generate):
    """Generate ``<root>/{images,annotations}/<split>`` once, safely across processes.

    One process renders into a temporary folder under ``root`` and renames the
    image folder, then the annotation folder into place (its presence means
    "complete"); the others wait on a lock and then find it.
    """
    img_dir, seg_dir = osp.join(root, 'images', split), osp.join(root, 'annotations', split)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    os.makedirs(osp.join(root, 'images'), exist_ok=True)
    generated = generate_once(
        root, split, lambda tmp: generate_shapes_seg(tmp, split, **generate),
        places=[(osp.join('images', split), img_dir), (osp.join('annotations', split), seg_dir)],
        generate=generate, record_file=osp.join(root, 'annotations', f'.{split}.generate'),
        lock_file=osp.join(root, 'annotations', f'.{split}.lock'))
    if not generated:  # generated earlier, or by another process while we waited
        return
    print_log(f'generated shapes segmentation split {split!r}: {seg_dir}', logger='current',
              level=logging.INFO)


@DATASETS.register_module()
class ShapesSegDataset(SegFolderDataset):
    """:class:`SegFolderDataset` over procedural shapes, generated on first use.

    Args:
        generate (dict, optional): arguments of :func:`generate_shapes_seg` except
            ``out_dir`` / ``split`` (``num_images`` required), used when the label
            folder does not exist. ``data_prefix`` must then be
            ``dict(img_path='images/<split>', seg_map_path='annotations/<split>')``.
            None: never generate.
        **kwargs: as :class:`SegFolderDataset`; classes, palette, ``.png`` suffixes and
            ``reduce_zero_label=False`` are the defaults.
    """

    METAINFO = dict(classes=CLASSES, palette=PALETTE)

    def __init__(self, *args, generate=None, img_suffix='.png', seg_map_suffix='.png',
                 reduce_zero_label=False, **kwargs):
        self.generate = generate
        super().__init__(*args, img_suffix=img_suffix, seg_map_suffix=seg_map_suffix,
                         reduce_zero_label=reduce_zero_label, **kwargs)

    def load_data_list(self):
        seg_dir = self.data_prefix.get('seg_map_path') or ''
        if self.generate is not None:
            split = osp.basename(osp.normpath(seg_dir))
            root = osp.dirname(osp.dirname(osp.normpath(seg_dir)))
            expected = osp.join(root, 'images', split)
            if (osp.basename(osp.dirname(osp.normpath(seg_dir))) != 'annotations'
                    or osp.normpath(self.data_prefix.get('img_path') or '') != expected):
                raise ValueError(
                    f'cannot generate shapes into img_path={self.data_prefix.get("img_path")!r}, '
                    f'seg_map_path={seg_dir!r}: they must be <root>/images/<split> and '
                    '<root>/annotations/<split>')
            ensure_shapes_seg_split(root, split, **self.generate)
        return super().load_data_list()
