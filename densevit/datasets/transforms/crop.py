"""Box-aware random crop (DETR's ``RandomSizeCrop``)."""
import numpy as np
from mmcv.transforms import BaseTransform

from densevit.registry import TRANSFORMS


@TRANSFORMS.register_module()
class RandomCrop(BaseTransform):
    """Crop a random window; shift and clip boxes, drop those left with zero area.

    Args:
        crop_size (tuple): meaning set by ``crop_type``:
            'absolute_range': (min, max) pixels; height and width are each drawn
            uniformly from [min, max] (DETR: (384, 600));
            'absolute': (h, w) pixels; 'relative': (h, w) fractions of the image.
            A window never exceeds the image: sides are capped at the image's.
        crop_type (str): see ``crop_size``.
        allow_negative_crop (bool): if False and the image has non-ignored boxes,
            retry up to ``max_tries`` windows to keep at least one; if none does,
            the image is left uncropped (rather than returning None and skipping it).

    Reads/updates ``img`` [H, W, ...], ``img_shape`` (h, w), ``gt_bboxes`` float [N, 4]
    xyxy, with ``gt_bboxes_labels`` [N] / ``gt_ignore_flags`` [N] filtered alike, and
    ``gt_seg_map`` [H, W] if present.
    """

    def __init__(self, crop_size=(384, 600), crop_type='absolute_range', allow_negative_crop=True,
                 max_tries=10):
        if crop_type not in ('absolute_range', 'absolute', 'relative'):
            raise ValueError(f'unknown crop_type {crop_type!r}')
        if crop_type == 'absolute_range' and crop_size[0] > crop_size[1]:
            raise ValueError(f'absolute_range crop_size must be (min, max), got {crop_size}')
        self.crop_size = tuple(crop_size)
        self.crop_type = crop_type
        self.allow_negative_crop = allow_negative_crop
        self.max_tries = max_tries

    def _window_size(self, h, w):
        if self.crop_type == 'absolute_range':
            lo, hi = self.crop_size
            return (np.random.randint(min(h, lo), min(h, hi) + 1),
                    np.random.randint(min(w, lo), min(w, hi) + 1))
        if self.crop_type == 'absolute':
            return min(h, self.crop_size[0]), min(w, self.crop_size[1])
        return max(1, int(h * self.crop_size[0] + 0.5)), max(1, int(w * self.crop_size[1] + 0.5))

    @staticmethod
    def _crop_boxes(bboxes, x0, y0, ch, cw):
        """Shift [N, 4] xyxy boxes into a window at (x0, y0) of size (ch, cw); clip; keep-mask."""
        boxes = bboxes - np.array([x0, y0, x0, y0], dtype=bboxes.dtype)
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, cw)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, ch)
        return boxes, (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])

    def transform(self, results):
        h, w = results['img'].shape[:2]
        bboxes = results.get('gt_bboxes', np.zeros((0, 4), np.float32))
        ignore = results.get('gt_ignore_flags', np.zeros(len(bboxes), bool))
        need_box = not self.allow_negative_crop and (~ignore).any()
        for _ in range(self.max_tries if need_box else 1):
            ch, cw = self._window_size(h, w)
            y0, x0 = np.random.randint(0, h - ch + 1), np.random.randint(0, w - cw + 1)
            boxes, keep = self._crop_boxes(bboxes, x0, y0, ch, cw)
            if not need_box or (keep & ~ignore).any():
                break
        else:
            return results
        results['img'] = results['img'][y0:y0 + ch, x0:x0 + cw]
        results['img_shape'] = (ch, cw)
        if 'gt_seg_map' in results:
            results['gt_seg_map'] = results['gt_seg_map'][y0:y0 + ch, x0:x0 + cw]
        if 'gt_bboxes' in results:
            results['gt_bboxes'] = boxes[keep]
            for key in ('gt_bboxes_labels', 'gt_ignore_flags'):
                if key in results:
                    results[key] = results[key][keep]
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(crop_size={self.crop_size}, '
                f'crop_type={self.crop_type!r}, '
                f'allow_negative_crop={self.allow_negative_crop})')
