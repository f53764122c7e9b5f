"""Random resized crop (Szegedy et al. 2015, "Inception"): the augmentation of MAE pre-training."""
import math

import cv2
import numpy as np
from mmcv.transforms import BaseTransform

from densevit.registry import TRANSFORMS

_INTERPOLATIONS = dict(nearest=cv2.INTER_NEAREST, bilinear=cv2.INTER_LINEAR,
                       bicubic=cv2.INTER_CUBIC, area=cv2.INTER_AREA)


@TRANSFORMS.register_module()
class RandomResizedCrop(BaseTransform):
    """Crop a random window of random area and aspect ratio, then resize it to ``size``.

    The window's area is a uniform fraction ``scale`` of the image's, its aspect ratio
    (width / height) log-uniform in ``ratio``; up to 10 draws are tried for a window
    that fits the image, then the largest centred window of an aspect ratio within
    ``ratio`` is taken (torchvision's rule). Images only: annotations are not moved.

    Args:
        size (int | tuple[int, int]): output (h, w), or a side for a square.
        scale (tuple[float, float]): range of the window's area / the image's (MAE: (0.2, 1.0)).
        ratio (tuple[float, float]): range of the window's width / height.
        interpolation (str): 'bicubic' (MAE), 'bilinear', 'nearest' or 'area'.

    Reads/updates ``img`` [H, W, C] and ``img_shape`` (h, w).
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation='bicubic'):
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        if not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f'RandomResizedCrop: scale must be (min, max) within (0, 1], '
                             f'got {scale}')
        if not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f'RandomResizedCrop: ratio must be (min, max) > 0, got {ratio}')
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f'RandomResizedCrop: interpolation must be one of '
                             f'{", ".join(_INTERPOLATIONS)}, got {interpolation!r}')
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation = interpolation

    def window(self, h, w, rng=np.random):
        """(y0, x0, height, width) of the crop in an h x w image; ``rng``: numpy's global
        generator, or a ``np.random.RandomState`` (same methods) for reproducible windows."""
        area = h * w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            cw = int(round(math.sqrt(target * aspect)))
            ch = int(round(math.sqrt(target / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                return rng.randint(0, h - ch + 1), rng.randint(0, w - cw + 1), ch, cw
        aspect = w / h  # fallback: the whole image, cut to the nearest allowed aspect ratio
        if aspect < self.ratio[0]:
            cw, ch = w, int(round(w / self.ratio[0]))
        elif aspect > self.ratio[1]:
            ch, cw = h, int(round(h * self.ratio[1]))
        else:
            ch, cw = h, w
        return (h - ch) // 2, (w - cw) // 2, ch, cw

    def crop(self, img, rng=np.random):
        """A random window of ``img`` [H, W, C] (:meth:`window`) resized to ``size``."""
        y0, x0, ch, cw = self.window(*img.shape[:2], rng)
        crop = img[y0:y0 + ch, x0:x0 + cw]
        out = cv2.resize(crop, (self.size[1], self.size[0]),
                         interpolation=_INTERPOLATIONS[self.interpolation])
        if out.ndim == 2 and img.ndim == 3:
            out = out[..., None]  # cv2 drops a single channel axis
        return out

    def transform(self, results):
        out = self.crop(results['img'])
        results['img'] = out
        results['img_shape'] = out.shape[:2]
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(size={self.size}, scale={self.scale}, '
                f'ratio={self.ratio}, interpolation={self.interpolation!r})')
