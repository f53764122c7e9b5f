"""Loading: images (with errors that name the file) and detection annotations as arrays.

Importing this module also registers mmcv's transforms (``LoadImageFromFile``,
``Resize``, ``RandomFlip``, ``RandomChoiceResize``, ``RandomChoice``...) in
mmengine's root TRANSFORMS, which is how ``type='RandomFlip'`` resolves from scope
``densevit``: our registry falls back to its parent. The registry imports this
module lazily, so configs need nothing extra.
"""
import logging
import re

import mmcv
import mmcv.transforms  # noqa: F401  (registers mmcv's transforms, see above)
import numpy as np
from mmcv.transforms import BaseTransform, LoadImageFromFile
from mmengine import fileio
from mmengine.logging import print_log

from densevit.registry import TRANSFORMS


class UnreadableImageError(ValueError):
    """An image that cannot be decoded. ``path`` names the file (None once the error
    has crossed a DataLoader worker, which rebuilds it from its message alone)."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


class ImageNotFoundError(FileNotFoundError):
    """An image file that does not exist (``path`` as for UnreadableImageError)."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


IMAGE_ERRORS = (UnreadableImageError, ImageNotFoundError)
UNREADABLE_HINT = ('List every unreadable image with tools/dataset/check.py CONFIG; '
                   'skip_unreadable=True on a training dataset skips them with a count')


def image_error_line(error):
    """The one line that says which image failed and why, also for an error re-raised by a
    DataLoader worker (whose message carries the worker's whole traceback)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else ''
    for cls in IMAGE_ERRORS:  # the traceback's last line: "<module>.<Class>: message"
        last = re.sub(rf'^[\w.]*{cls.__name__}: ', '', last)
    return last


def _skip(path, why):
    print_log(f'LoadImage: skipping image {path}: {why} (ignore_empty=True)', logger='current',
              level=logging.WARNING)
    return None


@TRANSFORMS.register_module()
class LoadImage(LoadImageFromFile):
    """mmcv's ``LoadImageFromFile`` whose failures say which file and what went wrong.

    Adds ``img`` (uint8 [H, W, 3] BGR unless ``color_type``/``to_float32`` say
    otherwise), ``img_shape`` and ``ori_shape`` (h, w). A missing file raises
    ``ImageNotFoundError('image not found: PATH')`` (a FileNotFoundError), an
    undecodable one ``UnreadableImageError('cannot decode image: PATH')`` (a
    ValueError; mmcv's own check is an ``assert``, gone under ``python -O``). The
    datasets' ``skip_unreadable=True`` skips both with a count per epoch
    (:mod:`densevit.datasets.unreadable`). With ``ignore_empty=True`` both log a
    warning naming the file and return None instead, so the dataset picks another
    image (mmengine's ``BaseDataset`` retries a random index, in training only).
    """

    def transform(self, results):
        path = results['img_path']
        try:
            img_bytes = fileio.get(path, backend_args=self.backend_args)
        except FileNotFoundError:
            if self.ignore_empty:
                return _skip(path, 'not found')
            raise ImageNotFoundError(f'image not found: {path}', path) from None
        try:
            img = mmcv.imfrombytes(img_bytes, flag=self.color_type, backend=self.imdecode_backend)
        except Exception:  # pillow / turbojpeg backends raise, cv2 returns None
            img = None
        if img is None:
            if self.ignore_empty:
                return _skip(path, 'cannot be decoded')
            raise UnreadableImageError(f'cannot decode image: {path} (corrupt or not an image)',
                                       path)
        if self.to_float32:
            img = img.astype(np.float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results


@TRANSFORMS.register_module()
class LoadDetAnnotations(BaseTransform):
    """``results['instances']`` (see CocoDataset) -> arrays.

    Adds ``gt_bboxes`` float32 [N, 4] xyxy pixels, ``gt_bboxes_labels`` int64 [N],
    ``gt_ignore_flags`` bool [N] (N = 0 gives correctly shaped empty arrays).
    """

    def transform(self, results):
        instances = results.get('instances', [])
        results['gt_bboxes'] = np.array([i['bbox'] for i in instances], np.float32).reshape(-1, 4)
        results['gt_bboxes_labels'] = np.array([i['bbox_label'] for i in instances], np.int64)
        results['gt_ignore_flags'] = np.array(
            [bool(i.get('ignore_flag', 0)) for i in instances], bool)
        return results
