"""Random crop, box-aware (DETR's ``RandomSizeCrop``) and label-aware (``cat_max_ratio``)."""
import numpy as np
from mmcv.transforms import BaseTransform

from densevit.datasets.transforms.geometric import crop_masks_and_maps
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
        cat_max_ratio (float): segmentation: retry up to ``max_tries`` windows until no
            single class covers ``cat_max_ratio`` or more of the window's labelled
            (not ``ignore_index``) pixels of ``gt_seg_map``, so crops are not all sky or
            wall; if none qualifies the last window is kept. 1.0 disables the check.
        ignore_index (int): label value not counted by ``cat_max_ratio``.

    Reads/updates ``img`` [H, W, ...], ``img_shape`` (h, w), ``gt_bboxes`` float [N, 4]
    xyxy, with ``gt_bboxes_labels`` [N] / ``gt_ignore_flags`` [N] / ``gt_masks`` [N, H, W]
    filtered alike (masks cut to the window, rows kept with their boxes), and
    ``gt_seg_map`` / ``gt_panoptic_seg`` [H, W] if present.
    """

    def __init__(self, crop_size=(384, 600), crop_type='absolute_range', allow_negative_crop=True,
                 max_tries=10, cat_max_ratio=1.0, ignore_index=255):
        if crop_type not in ('absolute_range', 'absolute', 'relative'):
            raise ValueError(f'unknown crop_type {crop_type!r}')
        if crop_type == 'absolute_range' and crop_size[0] > crop_size[1]:
            raise ValueError(f'absolute_range crop_size must be (min, max), got {crop_size}')
        self.crop_size = tuple(crop_size)
        self.crop_type = crop_type
        self.allow_negative_crop = allow_negative_crop
        self.max_tries = max_tries
        self.cat_max_ratio = cat_max_ratio
        self.ignore_index = ignore_index

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

    def _classes_balanced(self, seg, y0, x0, ch, cw):
        """True if no class holds ``cat_max_ratio`` of the labelled pixels of the window."""
        if seg is None or self.cat_max_ratio >= 1:
            return True
        labels, counts = np.unique(seg[y0:y0 + ch, x0:x0 + cw], return_counts=True)
        counts = counts[labels != self.ignore_index]
        return counts.size > 0 and counts.max() < self.cat_max_ratio * counts.sum()

    def transform(self, results):
        h, w = results['img'].shape[:2]
        bboxes = results.get('gt_bboxes', np.zeros((0, 4), np.float32))
        ignore = results.get('gt_ignore_flags', np.zeros(len(bboxes), bool))
        need_box = not self.allow_negative_crop and (~ignore).any()
        seg = results.get('gt_seg_map')
        check_seg = seg is not None and self.cat_max_ratio < 1
        for _ in range(self.max_tries if need_box or check_seg else 1):
            ch, cw = self._window_size(h, w)
            y0, x0 = np.random.randint(0, h - ch + 1), np.random.randint(0, w - cw + 1)
            boxes, keep = self._crop_boxes(bboxes, x0, y0, ch, cw)
            box_ok = not need_box or (keep & ~ignore).any()
            if box_ok and self._classes_balanced(seg, y0, x0, ch, cw):
                break
        else:
            if not box_ok:
                return results
            # only cat_max_ratio failed: keep the last window (a batch needs crop-sized images)
        results['img'] = results['img'][y0:y0 + ch, x0:x0 + cw]
        results['img_shape'] = (ch, cw)
        if 'gt_seg_map' in results:
            results['gt_seg_map'] = results['gt_seg_map'][y0:y0 + ch, x0:x0 + cw]
        crop_masks_and_maps(results, y0, x0, ch, cw, keep if 'gt_bboxes' in results else None)
        if 'gt_bboxes' in results:
            results['gt_bboxes'] = boxes[keep]
            for key in ('gt_bboxes_labels', 'gt_ignore_flags'):
                if key in results:
                    results[key] = results[key][keep]
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(crop_size={self.crop_size}, '
                f'crop_type={self.crop_type!r}, '
                f'allow_negative_crop={self.allow_negative_crop}, '
                f'cat_max_ratio={self.cat_max_ratio})')
