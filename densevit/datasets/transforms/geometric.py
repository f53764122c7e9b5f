"""mmcv's ``Resize`` and ``RandomFlip`` (and the random resizes built on ``Resize``), also
moving instance masks and panoptic maps.

mmcv's transforms move ``img``, ``gt_bboxes``, ``gt_seg_map`` and ``gt_keypoints``. These
subclasses, registered under the same names in scope ``densevit`` (so a config's
``type='RandomFlip'`` finds them before mmcv's, as MMDetection's own do in its scope),
also move ``gt_masks`` (bool [N, H, W], :mod:`densevit.datasets.masks`) and
``gt_panoptic_seg`` (int32 [H, W], :mod:`densevit.structures.panoptic`) exactly as the
label map: the same flip, a nearest-neighbour resize to the image's new size. Nothing
else changes. mmcv's ``Pad`` and ``CenterCrop`` do not move them: ``PackDetInputs``
refuses masks whose size is not the image's, naming the file.
"""
import mmcv
import numpy as np
from mmcv.transforms import RandomChoiceResize as MMCVRandomChoiceResize
from mmcv.transforms import RandomFlip as MMCVRandomFlip
from mmcv.transforms import RandomResize as MMCVRandomResize
from mmcv.transforms import Resize as MMCVResize

from densevit.datasets.masks import flip_masks
from densevit.registry import TRANSFORMS

MAP_KEYS = ('gt_panoptic_seg',)  # per-pixel maps moved like gt_seg_map besides it


def resize_masks_and_maps(results, backend='cv2'):
    """Nearest-neighbour resize ``gt_masks`` and the ``MAP_KEYS`` maps to ``img_shape``."""
    h, w = results['img_shape'][:2]
    for key in MAP_KEYS:
        if results.get(key) is not None:
            results[key] = mmcv.imresize(results[key], (w, h), interpolation='nearest',
                                         backend=backend)
    masks = results.get('gt_masks')
    if masks is not None:
        resized = [mmcv.imresize(m.view(np.uint8), (w, h), interpolation='nearest',
                                 backend=backend) for m in masks]
        results['gt_masks'] = np.stack(resized).astype(bool) if resized else np.zeros(
            (0, h, w), bool)


def crop_masks_and_maps(results, y0, x0, h, w, keep=None):
    """Cut the window (y0, x0, h, w) out of ``gt_masks`` (rows filtered by ``keep`` like
    the boxes) and the ``MAP_KEYS`` maps."""
    for key in MAP_KEYS:
        if results.get(key) is not None:
            results[key] = results[key][y0:y0 + h, x0:x0 + w]
    if results.get('gt_masks') is not None:
        masks = results['gt_masks'][:, y0:y0 + h, x0:x0 + w]
        results['gt_masks'] = np.ascontiguousarray(masks if keep is None else masks[keep])


@TRANSFORMS.register_module()
class Resize(MMCVResize):
    """mmcv's ``Resize`` (same arguments), also resizing ``gt_masks`` and
    ``gt_panoptic_seg`` (nearest) to the resized image."""

    def _resize_seg(self, results):
        super()._resize_seg(results)
        resize_masks_and_maps(results, self.backend)


@TRANSFORMS.register_module()
class RandomFlip(MMCVRandomFlip):
    """mmcv's ``RandomFlip`` (same arguments), also flipping ``gt_masks`` and
    ``gt_panoptic_seg``."""

    def _flip(self, results):
        super()._flip(results)
        direction = results['flip_direction']
        for key in MAP_KEYS:
            if results.get(key) is not None:
                results[key] = mmcv.imflip(results[key], direction=direction)
        if results.get('gt_masks') is not None:
            results['gt_masks'] = flip_masks(results['gt_masks'], direction)


@TRANSFORMS.register_module()
class RandomResize(MMCVRandomResize):
    """mmcv's ``RandomResize`` whose default ``resize_type`` is the :class:`Resize` above,
    whatever the default scope."""

    def __init__(self, scale, ratio_range=None, resize_type=Resize, **resize_kwargs):
        super().__init__(scale, ratio_range, resize_type, **resize_kwargs)


@TRANSFORMS.register_module()
class RandomChoiceResize(MMCVRandomChoiceResize):
    """mmcv's ``RandomChoiceResize`` whose default ``resize_type`` is the :class:`Resize`
    above, whatever the default scope."""

    def __init__(self, scales, resize_type=Resize, **resize_kwargs):
        super().__init__(scales, resize_type, **resize_kwargs)
