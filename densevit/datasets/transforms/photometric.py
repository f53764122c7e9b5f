"""Random brightness, contrast, saturation and hue (the SSD / MMSegmentation recipe)."""
import cv2
import numpy as np
from mmcv.transforms import BaseTransform

from densevit.registry import TRANSFORMS


def _affine(values, alpha=1.0, beta=0.0):
    """``values * alpha + beta`` clipped to uint8 (each step is an 8-bit image again)."""
    return np.clip(values.astype(np.float32) * alpha + beta, 0, 255).astype(np.uint8)


@TRANSFORMS.register_module()
class PhotoMetricDistortion(BaseTransform):
    """Distort the colours of a uint8 BGR ``img``; each step applies with probability 0.5.

    Order: brightness; then contrast either first or last (chosen at random) around
    saturation and hue, which are changed in HSV (OpenCV's 8-bit HSV: hue 0..179).

    Args:
        brightness_delta (int): add a uniform value in [-delta, delta].
        contrast_range (tuple[float, float]): multiply by a uniform factor in it.
        saturation_range (tuple[float, float]): multiply S by a uniform factor in it.
        hue_delta (int): add an integer in [-delta, delta] to H (mod 180).
    """

    def __init__(self, brightness_delta=32, contrast_range=(0.5, 1.5),
                 saturation_range=(0.5, 1.5), hue_delta=18):
        self.brightness_delta = brightness_delta
        self.contrast_range = tuple(contrast_range)
        self.saturation_range = tuple(saturation_range)
        self.hue_delta = hue_delta

    @staticmethod
    def _coin():
        return np.random.rand() < 0.5

    def _contrast(self, img):
        return _affine(img, alpha=np.random.uniform(*self.contrast_range)) if self._coin() else img

    def _in_hsv(self, img, channel, fn):
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
        hsv[..., channel] = fn(hsv[..., channel])
        return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)

    def transform(self, results):
        img = results['img']
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise TypeError(f'PhotoMetricDistortion needs a uint8 [H, W, 3] BGR image, got '
                            f'{img.dtype} {img.shape}: put it before any float conversion')
        if self._coin():
            img = _affine(img, beta=np.random.uniform(-self.brightness_delta,
                                                      self.brightness_delta))
        contrast_first = self._coin()
        if contrast_first:
            img = self._contrast(img)
        if self._coin():
            alpha = np.random.uniform(*self.saturation_range)
            img = self._in_hsv(img, 1, lambda s: _affine(s, alpha=alpha))
        if self._coin():
            delta = np.random.randint(-self.hue_delta, self.hue_delta + 1)
            img = self._in_hsv(img, 0, lambda h: ((h.astype(np.int32) + delta) % 180)
                               .astype(np.uint8))
        if not contrast_first:
            img = self._contrast(img)
        results['img'] = img
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(brightness_delta={self.brightness_delta}, '
                f'contrast_range={self.contrast_range}, '
                f'saturation_range={self.saturation_range}, hue_delta={self.hue_delta})')
