"""Loading label maps for semantic segmentation, checked against their image and classes.

Label maps are read as stored, and so are their images (``LoadImage``: no EXIF
orientation applied without an annotation size to say otherwise), so both share one
frame. A label map that has the size of its image only once the image's EXIF
orientation is applied (drawn on the rotated image) is refused naming the tag.
"""
import io
import logging

import cv2
import numpy as np
from mmcv.transforms import BaseTransform
from mmengine import fileio
from mmengine.logging import print_log

from densevit.datasets.transforms.loading import DataError, exif_orientation, rotated_size
from densevit.registry import TRANSFORMS

SHOW_VALUES = 10  # bad label values listed in an error


def decode_label_map(data, path):
    """PNG bytes -> [H, W] integer class map, read as stored (no colour conversion).

    OpenCV turns palette PNGs (the usual way class maps are stored with colours,
    e.g. Pascal VOC) into BGR; their indices are read with Pillow instead. A true
    colour image is refused: its colours are not class indices. Both raise DataError.
    """
    seg = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if seg is None:
        raise DataError(f'cannot decode label map: {path} (corrupt or not an image)')
    if seg.ndim == 3:
        from PIL import Image
        img = Image.open(io.BytesIO(data))
        if img.mode not in ('P', 'L', 'I;16', 'I'):
            raise DataError(
                f'label map {path} has {seg.shape[2]} channels (mode {img.mode}): expected one '
                'class index per pixel (a single-channel or palette PNG); convert colour-coded '
                'maps to class indices first')
        seg = np.asarray(img)
    return seg


def reduce_zero_label(seg):
    """0 ("unlabelled") -> 255, c -> c - 1, 255 stays 255 (ADE20K's labels)."""
    out = seg.astype(np.int32) - 1
    out[(seg == 0) | (seg == 255)] = 255
    return out


@TRANSFORMS.register_module()
class LoadSegAnnotations(BaseTransform):
    """Read ``results['seg_map_path']`` into ``gt_seg_map`` [H, W] and check it.

    Checks, each failing with a message naming the file(s):
        - the map has the size of the image as loaded (``ori_shape``, so it may come
          after a Resize: test pipelines keep labels at the original size);
        - after ``reduce_zero_label``, every value is < ``num_classes`` (from the
          dataset) or is ``ignore_index``.

    Args:
        reduce_zero_label (bool, optional): None takes the dataset's setting
            (``results['reduce_zero_label']``).
        invalid_label (str): 'error' raises on out-of-range values; 'ignore' sets them
            to ``ignore_index`` and logs a warning naming the file.
        backend_args (dict, optional): mmengine fileio backend.

    Adds ``gt_seg_map`` (uint8 when values fit, else int32: mmcv's nearest resize
    takes both), ``reduce_zero_label``.
    """

    def __init__(self, reduce_zero_label=None, invalid_label='error', backend_args=None):
        if invalid_label not in ('error', 'ignore'):
            raise ValueError(f"invalid_label must be 'error' or 'ignore', got {invalid_label!r}")
        self.reduce_zero_label = reduce_zero_label
        self.invalid_label = invalid_label
        self.backend_args = backend_args
        self._warned_binary = False

    def transform(self, results):
        path = results['seg_map_path']
        try:
            data = fileio.get(path, backend_args=self.backend_args)
        except FileNotFoundError:
            raise FileNotFoundError(f'label map not found: {path}') from None
        seg = decode_label_map(data, path)
        img_shape = results.get('ori_shape', results.get('img_shape'))
        if img_shape is not None and tuple(seg.shape[:2]) != tuple(img_shape[:2]):
            raise DataError(f'label map {path} is {seg.shape[0]}x{seg.shape[1]} (HxW) but its '
                            f"image {results.get('img_path')} is {img_shape[0]}x{img_shape[1]}"
                            + self._exif_cause(results.get('img_path'), img_shape, seg.shape))
        reduce = self.reduce_zero_label
        if reduce is None:
            reduce = results.get('reduce_zero_label', False)
        seg = reduce_zero_label(seg) if reduce else seg.astype(np.int32)
        seg = self._check_values(seg, results, path, reduce)
        results['gt_seg_map'] = seg.astype(np.uint8) if seg.max(initial=0) <= 255 else seg
        results['reduce_zero_label'] = reduce
        return results

    def _check_values(self, seg, results, path, reduce):
        num_classes = results.get('num_classes')
        ignore = results.get('ignore_index', 255)
        if num_classes is None:
            return seg
        values = np.unique(seg)
        if num_classes == 2 and not self._warned_binary and set(values.tolist()) == {0, ignore}:
            self._warned_binary = True  # a common mistake: 0/255 binary masks
            print_log(f'label map {path} holds only 0 and {ignore}, and {ignore} is ignored: if '
                      f'{ignore} marks the foreground, store it as 1', logger='current',
                      level=logging.WARNING)
        bad = values[((values < 0) | (values >= num_classes)) & (values != ignore)]
        if not len(bad):
            return seg
        shown = ', '.join(str(v) for v in bad[:SHOW_VALUES]) + (' ...' if len(bad) > SHOW_VALUES
                                                                 else '')
        hint = ''
        if not reduce and bad.tolist() == [num_classes]:
            hint = ' (labels 1..K with 0 = unlabelled? set reduce_zero_label=True)'
        message = (f'label map {path} has values {shown} outside 0..{num_classes - 1} '
                   f'(ignore_index {ignore}){" after reduce_zero_label" if reduce else ""}{hint}')
        if self.invalid_label == 'error':
            raise DataError(message + "; or set invalid_label='ignore' to ignore them")
        print_log(message + f'; set to {ignore}', logger='current', level=logging.WARNING)
        seg = seg.copy()
        seg[np.isin(seg, bad)] = ignore
        return seg

    def _exif_cause(self, img_path, img_shape, seg_shape):
        """What to add to a size mismatch when the image's EXIF orientation explains it."""
        if img_path is None:
            return ''
        try:
            orientation = exif_orientation(fileio.get(img_path, backend_args=self.backend_args))
        except FileNotFoundError:
            return ''
        h, w = img_shape[:2]
        if orientation in (None, 1) or rotated_size(w, h, orientation)[::-1] != seg_shape[:2]:
            return ''
        return (f' as stored, and the label map has its size with its EXIF orientation '
                f'{orientation} applied: images and label maps are read as stored (no EXIF '
                'rotation); rotate the label map to the stored image, or write the image '
                'rotated without the tag')

    def __repr__(self):
        return (f'{self.__class__.__name__}(reduce_zero_label={self.reduce_zero_label}, '
                f'invalid_label={self.invalid_label!r})')
