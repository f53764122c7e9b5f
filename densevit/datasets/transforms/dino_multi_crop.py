"""DINO's multi-crop augmentation (Caron et al. 2021, Sec. 3.1 and App. D): two global crops and
N local crops of an image, each flipped, colour-jittered and blurred on its own."""
import zlib

import cv2
import numpy as np
from mmcv.transforms import BaseTransform

from densevit.registry import TRANSFORMS
from densevit.structures import DataSample

from .formatting import image_to_tensor
from .random_resized_crop import RandomResizedCrop


def _pair(size):
    return (size, size) if isinstance(size, int) else tuple(size)


def _blend(img, other, factor):
    """``img * factor + other * (1 - factor)`` clipped to 0..255 (float32)."""
    return np.clip(img * factor + other * (1 - factor), 0, 255)


def _gray(img):
    """BGR float [H, W, 3] -> its luma [H, W, 1] (ITU-R 601, as torchvision's grayscale)."""
    return (0.114 * img[..., 0] + 0.587 * img[..., 1] + 0.299 * img[..., 2])[..., None]


@TRANSFORMS.register_module()
class DINOMultiCrop(BaseTransform):
    """Crop an image ``num_global`` + ``num_local`` times: global crops of area fraction
    ``global_scale`` resized to ``global_size``, local ones of ``local_scale`` resized to
    ``local_size`` (random resized crops, aspect ratio in ``ratio``), each then flipped
    horizontally (``flip_prob``), colour-jittered (with probability ``jitter_prob``: brightness,
    contrast, saturation and hue in a random order, torchvision's ``ColorJitter``), turned grey
    (``gray_prob``), Gaussian-blurred (``global_blur[i]`` for global crop i, the list cycled;
    ``local_blur`` for local crops; sigma uniform in ``blur_sigma``) and solarised
    (``global_solarize[i]``; pixels >= 128 inverted). The defaults are DINO's (224 / 96 pixels,
    scales (0.4, 1) / (0.05, 0.4), jitter (0.4, 0.4, 0.2, 0.1) with p 0.8, grey 0.2, blur 1.0 /
    0.1 / 0.5, solarise 0 / 0.2).

    Writes ``crops``: the global crops then the local ones, uint8 [h, w, C] in the image's
    channel order, and ``img_shape`` (the global size).

    Args:
        seed (int, optional): None (training): numpy's global generator (seeded per worker by
            mmengine). An int (validation): each image's crops are drawn from its own generator,
            seeded by ``seed`` and its ``img_path``, so an image gets the same crops every time.

    Raises ValueError when built with fewer than two global crops, or local crops larger than
    the global ones (``local_size`` above ``global_size``, or a ``local_scale`` range above
    ``global_scale``'s), naming the values.
    """

    def __init__(self, global_size=224, local_size=96, num_global=2, num_local=8,
                 global_scale=(0.4, 1.0), local_scale=(0.05, 0.4), ratio=(3 / 4, 4 / 3),
                 interpolation='bicubic', flip_prob=0.5, jitter_prob=0.8,
                 jitter=(0.4, 0.4, 0.2, 0.1), gray_prob=0.2, global_blur=(1.0, 0.1),
                 local_blur=0.5, blur_sigma=(0.1, 2.0), global_solarize=(0.0, 0.2), seed=None):
        if int(num_global) != num_global or num_global < 2:
            raise ValueError(f'DINOMultiCrop: num_global must be an integer >= 2 (the teacher '
                             f'compares each global crop with the others), got {num_global}')
        if int(num_local) != num_local or num_local < 0:
            raise ValueError(f'DINOMultiCrop: num_local must be an integer >= 0, got {num_local}')
        gs, ls = _pair(global_size), _pair(local_size)
        if ls[0] > gs[0] or ls[1] > gs[1]:
            raise ValueError(f'DINOMultiCrop: local crops ({ls[0]}x{ls[1]}, local_size='
                             f'{local_size}) larger than the global ones ({gs[0]}x{gs[1]}, '
                             f'global_size={global_size})')
        if local_scale[0] > global_scale[0] or local_scale[1] > global_scale[1]:
            raise ValueError(f'DINOMultiCrop: local crops cover more of the image than the global '
                             f'ones: local_scale={tuple(local_scale)} above '
                             f'global_scale={tuple(global_scale)}')
        self.global_crop = RandomResizedCrop(gs, global_scale, ratio, interpolation)
        self.local_crop = RandomResizedCrop(ls, local_scale, ratio, interpolation)
        self.num_global, self.num_local = int(num_global), int(num_local)
        self.flip_prob, self.jitter_prob, self.gray_prob = flip_prob, jitter_prob, gray_prob
        self.jitter = tuple(jitter)
        self.global_blur, self.local_blur = tuple(global_blur), local_blur
        self.blur_sigma = tuple(blur_sigma)
        self.global_solarize = tuple(global_solarize)
        self.seed = seed

    def _rng(self, results):
        if self.seed is None:
            return np.random
        key = zlib.crc32(str(results.get('img_path', '')).encode())
        return np.random.RandomState((self.seed * 1_000_003 + key) % 2 ** 32)

    def _colour_jitter(self, img, rng):
        b, c, s, h = self.jitter
        for op in rng.permutation(4):
            if op == 0:
                img = _blend(img, 0.0, rng.uniform(1 - b, 1 + b))
            elif op == 1:
                img = _blend(img, _gray(img).mean(), rng.uniform(1 - c, 1 + c))
            elif op == 2:
                img = _blend(img, _gray(img), rng.uniform(1 - s, 1 + s))
            else:  # hue: a shift of a fraction of the colour circle (OpenCV's H is 0..179)
                hsv = cv2.cvtColor(img.astype(np.uint8), cv2.COLOR_BGR2HSV)
                hsv[..., 0] = (hsv[..., 0].astype(np.int32)
                               + int(round(rng.uniform(-h, h) * 180))) % 180
                img = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR).astype(np.float32)
        return img

    def _augment(self, img, rng, blur_prob, solarize_prob):
        if rng.rand() < self.flip_prob:
            img = img[:, ::-1]
        out = np.ascontiguousarray(img).astype(np.float32)
        if out.shape[-1] == 3 and rng.rand() < self.jitter_prob:
            out = self._colour_jitter(out, rng)
        if out.shape[-1] == 3 and rng.rand() < self.gray_prob:
            out = np.repeat(_gray(out), 3, axis=-1)
        if rng.rand() < blur_prob:
            blurred = cv2.GaussianBlur(out, (0, 0), rng.uniform(*self.blur_sigma))
            out = blurred.reshape(out.shape)  # cv2 drops a single channel axis
        out = np.round(out).astype(np.uint8)
        if rng.rand() < solarize_prob:
            out = np.where(out >= 128, 255 - out, out)
        return out

    def transform(self, results):
        img, rng = results['img'], self._rng(results)
        crops = []
        for i in range(self.num_global):
            crops.append(self._augment(self.global_crop.crop(img, rng), rng,
                                       self.global_blur[i % len(self.global_blur)],
                                       self.global_solarize[i % len(self.global_solarize)]))
        for _ in range(self.num_local):
            crops.append(self._augment(self.local_crop.crop(img, rng), rng, self.local_blur, 0.0))
        results['crops'] = crops
        results['img_shape'] = crops[0].shape[:2]
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(global={self.num_global} x {self.global_crop.size} '
                f'{self.global_crop.scale}, local={self.num_local} x {self.local_crop.size} '
                f'{self.local_crop.scale}, seed={self.seed})')


@TRANSFORMS.register_module()
class PackMultiCropInputs(BaseTransform):
    """Pack ``crops`` (from :class:`DINOMultiCrop`) as ``inputs``: a list of [C, h, w] tensors
    (dtype and channels unchanged), and a :class:`DataSample` with the ``meta_keys`` found in
    results as metainfo; ``MultiCropDataPreprocessor`` batches and normalises them."""

    def __init__(self, meta_keys=('img_path', 'ori_shape', 'img_shape')):
        self.meta_keys = tuple(meta_keys)

    def transform(self, results):
        sample = DataSample()
        sample.set_metainfo({k: results[k] for k in self.meta_keys if k in results})
        return dict(inputs=[image_to_tensor(c) for c in results['crops']], data_samples=sample)
