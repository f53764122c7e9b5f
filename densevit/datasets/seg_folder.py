"""Semantic segmentation from two folders: images and same-named label maps.

``load_data_list`` returns one dict per image::

    dict(img_path=str, seg_map_path=str,
         reduce_zero_label=bool,  # read by LoadSegAnnotations
         num_classes=int,         # labels must be < num_classes or == ignore_index
         ignore_index=int)

An image ``<img_path>/a/b.jpg`` pairs with ``<seg_map_path>/a/b.png`` (sub-folders
allowed; suffixes set by ``img_suffix`` / ``seg_map_suffix``).
"""
import os
import os.path as osp

from mmengine import fileio
from mmengine.dataset import BaseDataset

from densevit.datasets.transforms.loading import DataError
from densevit.datasets.transforms.seg_loading import decode_label_map
from densevit.datasets.unreadable import SkipUnreadableMixin
from densevit.registry import DATASETS
from densevit.utils.defaults import DEFAULT, resolve_default

SHOW_FIRST = 5  # names listed in an error about missing files


def list_files(folder, suffix):
    """Paths relative to ``folder`` of the files ending in ``suffix`` (recursive, sorted)."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        rel = osp.relpath(root, folder)
        found += [osp.normpath(osp.join(rel, f)) for f in sorted(files) if f.endswith(suffix)]
    return found


@DATASETS.register_module()
class SegFolderDataset(SkipUnreadableMixin, BaseDataset):
    """Images and label maps (one class index per pixel, PNG) in two folders.

    Args:
        data_root (str): joined to both folders of ``data_prefix``.
        data_prefix (dict): ``dict(img_path='images/training',
            seg_map_path='annotations/training')``; default
            ``dict(img_path='', seg_map_path='')``.
        img_suffix, seg_map_suffix (str): file endings of images and of label maps.
        metainfo (dict): ``dict(classes=(...), palette=[[r, g, b], ...])``; classes
            are required (their count is K), the palette optional.
        reduce_zero_label (bool): label 0 means "unlabelled": it becomes 255 and every
            other label drops by one (ADE20K).
        ignore_index (int): label value the loss and metric skip.
        ann_file (str, optional): text file of image names (relative to the image
            folder, without suffix), one per line: a split; default all images.
        skip_unreadable (bool): in training, replace a missing or undecodable image by
            another and log a count per epoch (:mod:`densevit.datasets.unreadable`);
            default False: such an image stops training with an error naming it.
        **kwargs: the rest of ``mmengine.dataset.BaseDataset`` (pipeline, test_mode,
            lazy_init, indices, serialize_data, max_refetch).

    Raises FileNotFoundError naming a missing folder, or the images whose label map
    is missing (how many, and the first few); DataError (a ValueError) when the first
    label map is not one class index per pixel (e.g. a colour-coded RGB map), so a
    wrongly exported set stops when it is loaded. Every other map is checked when first
    used (``LoadSegAnnotations``), all of them by tools/dataset/check.py.
    """

    METAINFO = dict(classes=None, palette=None)

    def __init__(self, data_root='', data_prefix=DEFAULT, img_suffix='.jpg',
                 seg_map_suffix='.png', metainfo=None, reduce_zero_label=False,
                 ignore_index=255, ann_file='', **kwargs):
        data_prefix = resolve_default(data_prefix, dict(img_path='', seg_map_path=''))
        self.img_suffix = img_suffix
        self.seg_map_suffix = seg_map_suffix
        self.reduce_zero_label = reduce_zero_label
        self.ignore_index = ignore_index
        super().__init__(ann_file=ann_file, data_root=data_root, data_prefix=data_prefix,
                         metainfo=metainfo, **kwargs)

    def _check_metainfo(self):
        classes = self._metainfo.get('classes')
        if not classes:
            raise ValueError(f'{type(self).__name__} needs metainfo=dict(classes=(...)): the '
                             'class names, in label order')
        palette = self._metainfo.get('palette')
        if palette is not None and len(palette) != len(classes):
            raise ValueError(f'metainfo palette has {len(palette)} colours for '
                             f'{len(classes)} classes')
        self._metainfo['reduce_zero_label'] = self.reduce_zero_label
        return len(classes)

    def _folder(self, key, what):
        folder = self.data_prefix.get(key)
        if not folder or not osp.isdir(folder):
            raise FileNotFoundError(
                f'{type(self).__name__}: {what} folder not found: {folder!r} (data_root '
                f'{self.data_root!r} + data_prefix.{key}). Put the dataset there in the '
                f'layout <data_root>/images/<split>/*{self.img_suffix} and '
                f'<data_root>/annotations/<split>/*{self.seg_map_suffix} (see docs/datasets.md), or '
                'point data_root / data_prefix at it with --cfg-options.')
        return folder

    def _image_names(self, img_dir):
        """Image paths relative to ``img_dir``, without suffix."""
        if self.ann_file:
            if not osp.isfile(self.ann_file):
                raise FileNotFoundError(f'split file not found: {self.ann_file}')
            with open(self.ann_file) as f:
                return [line.strip() for line in f if line.strip()]
        return [p[:-len(self.img_suffix)] for p in list_files(img_dir, self.img_suffix)]

    def load_data_list(self):
        num_classes = self._check_metainfo()
        img_dir = self._folder('img_path', 'image')
        seg_dir = self._folder('seg_map_path', 'label map')
        names = self._image_names(img_dir)
        if not names:
            raise DataError(f'no *{self.img_suffix} images in {img_dir}')
        data_list, missing = [], []
        for name in names:
            seg_path = osp.join(seg_dir, name + self.seg_map_suffix)
            if not osp.isfile(seg_path):
                missing.append(name + self.img_suffix)
                continue
            data_list.append(dict(img_path=osp.join(img_dir, name + self.img_suffix),
                                  seg_map_path=seg_path, reduce_zero_label=self.reduce_zero_label,
                                  num_classes=num_classes, ignore_index=self.ignore_index))
        if missing:
            raise FileNotFoundError(
                f'{len(missing)} of {len(names)} images in {img_dir} have no label map '
                f'<name>{self.seg_map_suffix} in {seg_dir}; first: '
                + ', '.join(missing[:SHOW_FIRST]))
        first = data_list[0]['seg_map_path']
        decode_label_map(fileio.get(first), first)
        return data_list
