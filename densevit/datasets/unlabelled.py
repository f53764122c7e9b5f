"""Every image under a folder, without labels: the data of self-supervised pre-training (MAE).

``load_data_list`` returns one dict per image, sorted by path::

    dict(img_path=str)

The folder is searched recursively (sub-folders, e.g. ImageNet's class folders, are
just more images; their names are not labels); files count as images by their
extension, in any case (``IMAGE_EXTENSIONS``).
"""
import os.path as osp

from mmengine.dataset import BaseDataset

from densevit.datasets.seg_folder import list_files
from densevit.datasets.shapes import ensure_shapes_split
from densevit.datasets.unreadable import SkipUnreadableMixin
from densevit.registry import DATASETS
from densevit.utils.defaults import DEFAULT, resolve_default

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff', '.ppm', '.pgm')


@DATASETS.register_module()
class UnlabelledImageDataset(SkipUnreadableMixin, BaseDataset):
    """The images under ``data_root / data_prefix['img_path']``, recursively, no labels.

    Args:
        data_root (str): joined to ``data_prefix['img_path']``.
        data_prefix (dict): ``dict(img_path='train/')``; default ``dict(img_path='')``.
        extensions (tuple[str]): file endings that count as images (case-insensitive).
        generate (dict, optional): arguments of the shapes generator
            (:func:`densevit.datasets.shapes.generate_shapes`, ``num_images`` required)
            to write the folder on first use: it must then be ``<root>/<split>/``, and the
            split is written as the shapes detection datasets write it (with its
            ``<root>/annotations/instances_<split>.json``, not read here), so the same
            arguments make the same images for both. None: never generate.
        skip_unreadable (bool): in training, replace a missing or undecodable image by
            another and log a count per epoch (:mod:`densevit.datasets.unreadable`);
            default False: such an image stops training with an error naming it.
        **kwargs: the rest of ``mmengine.dataset.BaseDataset`` (pipeline, test_mode,
            lazy_init, indices, serialize_data, max_refetch).

    Raises FileNotFoundError naming a missing folder, ValueError naming a folder without
    images.
    """

    METAINFO = dict()

    def __init__(self, data_root='', data_prefix=DEFAULT, extensions=IMAGE_EXTENSIONS,
                 generate=None, **kwargs):
        data_prefix = resolve_default(data_prefix, dict(img_path=''))
        self.extensions = tuple(e.lower() for e in extensions)
        self.generate = generate
        super().__init__(data_root=data_root, data_prefix=data_prefix, **kwargs)

    def _generate(self, img_dir):
        root, split = osp.split(osp.normpath(osp.abspath(img_dir)))
        ensure_shapes_split(osp.join(root, 'annotations', f'instances_{split}.json'), img_dir,
                            **self.generate)

    def load_data_list(self):
        img_dir = osp.normpath(self.data_prefix.get('img_path') or self.data_root or '.')
        if self.generate is not None:
            self._generate(img_dir)
        if not osp.isdir(img_dir):
            raise FileNotFoundError(
                f'{type(self).__name__}: image folder not found: {img_dir!r} (data_root '
                f'{self.data_root!r} + data_prefix.img_path). Point data_root / data_prefix at '
                'a folder of images with --cfg-options.')
        names = [p for p in list_files(img_dir, '') if p.lower().endswith(self.extensions)]
        if not names:
            raise ValueError(f'{type(self).__name__}: no images ({", ".join(self.extensions)}) '
                             f'in {img_dir} or its sub-folders')
        return [dict(img_path=osp.join(img_dir, name)) for name in names]
