"""Loading: images (with errors that name the file) and detection annotations as arrays.

EXIF orientation, one rule everywhere: an image is decoded as stored (its EXIF
orientation tag not applied), unless its annotation's ``width`` / ``height`` match
only the rotated size, in which case the tag is applied (the annotations were made
on the rotated image); when neither size matches, the image is refused naming the
file and the tag (:class:`DataError`). Label maps carry no size of their own and are
read as stored too, so a segmentation image and its label map share one frame.

Importing this module also registers mmcv's transforms (``LoadImageFromFile``,
``Resize``, ``RandomFlip``, ``RandomChoiceResize``, ``RandomChoice``...) in
mmengine's root TRANSFORMS, which is how ``type='RandomFlip'`` resolves from scope
``densevit``: our registry falls back to its parent. The registry imports this
module lazily, so configs need nothing extra.
"""
import io
import logging
import re

import mmcv
import mmcv.transforms  # noqa: F401  (registers mmcv's transforms, see above)
import numpy as np
from mmcv.transforms import BaseTransform, LoadImageFromFile
from mmengine import fileio
from mmengine.logging import print_log
from PIL import Image

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


class DataError(ValueError):
    """A problem of the data itself, found when a dataset is loaded or a sample first
    used: an annotation file's repeated ids, a training set without a trainable box, a
    colour label map, an image in neither frame of its annotation. The message is one
    line naming the file and the problem; :func:`image_error_line` recovers it from a
    DataLoader worker's re-raised copy."""


IMAGE_ERRORS = (UnreadableImageError, ImageNotFoundError)
UNREADABLE_HINT = ('List every unreadable image with tools/dataset/check.py CONFIG; '
                   'skip_unreadable=True on a training dataset skips them with a count')


def image_error_line(error):
    """The one line that says which image (or data file) failed and why, also for an error
    re-raised by a DataLoader worker (whose message carries the worker's whole traceback)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else ''
    for cls in (*IMAGE_ERRORS, DataError):  # the traceback's last line: "<module>.<Class>: message"
        last = re.sub(rf'^[\w.]*{cls.__name__}: ', '', last)
    return last


EXIF_ORIENTATION = 0x0112  # the EXIF tag; values 5-8 swap width and height
# mmcv's flags for the two frames; only its cv2 and pillow backends apply the tag
_AS_STORED = {'color': 'color_ignore_orientation', 'grayscale': 'grayscale_ignore_orientation'}
_ROTATED = {stored: rotated for rotated, stored in _AS_STORED.items()}
EXIF_BACKENDS = ('cv2', 'pillow')


def exif_orientation(data):
    """The EXIF orientation (1-8) of encoded image bytes, or None (no tag, no EXIF, or
    bytes Pillow cannot open). Reads the header only."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            value = img.getexif().get(EXIF_ORIENTATION)
    except Exception:  # any header Pillow cannot read: no orientation
        return None
    return value if value in range(1, 9) else None


def rotated_size(width, height, orientation):
    """(width, height) of a ``width`` x ``height`` image once its EXIF orientation is applied."""
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


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

    EXIF orientation (the module's rule): decoded as stored unless ``results``'
    ``width`` / ``height`` (COCO data infos have them) match only the rotated size;
    neither raises :class:`DataError` naming the file and the tag. ``color_type``
    'color' and 'color_ignore_orientation' (or the grayscale pair) are one setting here.
    """

    def transform(self, results):
        path = results['img_path']
        try:
            img_bytes = fileio.get(path, backend_args=self.backend_args)
        except FileNotFoundError:
            if self.ignore_empty:
                return _skip(path, 'not found')
            raise ImageNotFoundError(f'image not found: {path}', path) from None
        stored = (_AS_STORED.get(self.color_type, self.color_type)
                  if self.imdecode_backend in EXIF_BACKENDS else self.color_type)
        img = self._decode(img_bytes, stored)
        size = results.get('width'), results.get('height')
        if img is not None and None not in size and (img.shape[1], img.shape[0]) != size:
            img = self._annotation_frame(img, img_bytes, path, size)
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

    def _decode(self, img_bytes, flag):
        try:
            return mmcv.imfrombytes(img_bytes, flag=flag, backend=self.imdecode_backend)
        except Exception:  # pillow / turbojpeg backends raise, cv2 returns None
            return None

    def _annotation_frame(self, img, img_bytes, path, size):
        """``img`` decoded as stored, whose size is not the annotation's ``size`` (w, h):
        the rotated image if that has the annotation's size, else a DataError when the
        file has an EXIF orientation. Without one, a plain size mismatch is left to
        tools/dataset/check.py, as before."""
        orientation = exif_orientation(img_bytes)
        if orientation in (None, 1):
            return img
        stored = img.shape[1], img.shape[0]
        rotated = rotated_size(*stored, orientation)
        rotated_flag = _ROTATED.get(_AS_STORED.get(self.color_type, self.color_type))
        frames = (f'{path}: image is {stored[0]}x{stored[1]} as stored and {rotated[0]}x'
                  f'{rotated[1]} with its EXIF orientation {orientation} applied, but its '
                  f'annotation says {size[0]}x{size[1]} (width x height)')
        if rotated != tuple(size):
            raise DataError(f'{frames}: neither frame, so its boxes cannot be placed; fix the '
                            "annotation's width / height or the file")
        if rotated_flag is None or self.imdecode_backend not in EXIF_BACKENDS:
            raise DataError(f'{frames}: the rotated frame, which imdecode_backend='
                            f'{self.imdecode_backend!r} with color_type={self.color_type!r} '
                            "cannot apply; use imdecode_backend 'cv2' or 'pillow'")
        return self._decode(img_bytes, rotated_flag)


def mark_original_size(results, size):
    """Record whether annotations of ``size`` were loaded after the image was resized (a
    test pipeline keeps them at the original size): PackDetInputs then expects that size."""
    img = results.get('img')
    results['gt_at_ori_shape'] = img is not None and tuple(size) != tuple(img.shape[:2])


@TRANSFORMS.register_module()
class LoadDetAnnotations(BaseTransform):
    """``results['instances']`` (see CocoDataset) -> arrays.

    Adds ``gt_bboxes`` float32 [N, 4] xyxy pixels, ``gt_bboxes_labels`` int64 [N],
    ``gt_ignore_flags`` bool [N] (N = 0 gives correctly shaped empty arrays); with
    ``with_mask`` also ``gt_masks`` bool [N, H, W] at the annotation's ``height`` x
    ``width`` (:mod:`densevit.datasets.masks`).

    Args:
        with_mask (bool): decode each instance's COCO ``segmentation`` (polygons,
            uncompressed or compressed RLE) through pycocotools. An instance without one,
            a malformed one, or an image whose size is not its annotation's raises
            :class:`DataError` naming the file and annotation.
        max_overlap (float, optional): with ``with_mask``, refuse an image where two
            non-crowd masks share more than this fraction of the smaller one
            (DataError naming the file and both annotations). Default None: not
            checked, since COCO's own instance masks overlap where annotators'
            polygons cross; tools/dataset/check.py lists overlaps over 1%.
    """

    def __init__(self, with_mask=False, max_overlap=None):
        self.with_mask = with_mask
        self.max_overlap = max_overlap

    def transform(self, results):
        instances = results.get('instances', [])
        results['gt_bboxes'] = np.array([i['bbox'] for i in instances], np.float32).reshape(-1, 4)
        results['gt_bboxes_labels'] = np.array([i['bbox_label'] for i in instances], np.int64)
        results['gt_ignore_flags'] = np.array(
            [bool(i.get('ignore_flag', 0)) for i in instances], bool)
        if self.with_mask:
            from densevit.datasets.masks import load_instance_masks  # imports this module
            results['gt_masks'] = load_instance_masks(results, self.max_overlap)
            mark_original_size(results, results['gt_masks'].shape[-2:])
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(with_mask={self.with_mask}, '
                f'max_overlap={self.max_overlap})')
