"""Batch preparation for segmentors: float, normalize, pad images and label maps alike."""
import math

import torch.nn.functional as F
from mmengine.structures import PixelData

from densevit.registry import MODELS

from .token_limit import DEFAULT_MAX_TOKENS, TokenLimitedPreprocessor


@MODELS.register_module()
class SegDataPreprocessor(TokenLimitedPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` (BGR->RGB, normalize, pad) plus label padding.

    Images are padded at the bottom/right with ``pad_val`` (after normalization, so 0
    is the mean colour) to the largest size in the batch, then in training to at
    least ``size``, then up to a multiple of ``size_divisor``. In training each
    ``gt_sem_seg`` [1, H, W] is padded the same way with ``seg_pad_val`` (255:
    ignored by the loss); it must match its image's size. Outside training the
    labels are left alone: the test pipeline keeps them at the original size, where
    the metric compares them with predictions.

    Args:
        mean, std (sequence, optional): per channel, in the order after ``bgr_to_rgb``.
        bgr_to_rgb, rgb_to_bgr (bool): swap channels first.
        size (tuple[int, int], optional): (h, w) minimum training batch size, usually
            the crop size (crops of small images come out smaller).
        size_divisor (int, optional): pad to multiples of this (e.g. the patch size).
        pad_val (float): image padding value; seg_pad_val (int): label padding value.
        patch_size (int), max_tokens (int | None): an image of more than ``max_tokens``
            patches of ``patch_size`` pixels is refused, naming its file (``token_limit.py``).

    Sets ``batch_input_shape`` and ``pad_shape`` (h, w) in every DataSample.

    Input: ``dict(inputs=list of uint8 [3, H_i, W_i], data_samples=list of DataSample)``.
    Output: ``dict(inputs=float [B, 3, H, W], data_samples=...)``.
    """

    def __init__(self, mean=None, std=None, bgr_to_rgb=False, rgb_to_bgr=False, size=None,
                 size_divisor=None, pad_val=0, seg_pad_val=255, non_blocking=False,
                 patch_size=16, max_tokens=DEFAULT_MAX_TOKENS):
        super().__init__(mean=mean, std=std, pad_size_divisor=size_divisor or 1,
                         pad_value=pad_val, bgr_to_rgb=bgr_to_rgb, rgb_to_bgr=rgb_to_bgr,
                         non_blocking=non_blocking, patch_size=patch_size,
                         max_tokens=max_tokens)
        self.size = tuple(size) if size is not None else None
        self.seg_pad_val = seg_pad_val

    def forward(self, data, training=False):
        raw = data['inputs']
        image_shapes = [tuple(img.shape[-2:]) for img in raw]
        data = super().forward(data, training)
        inputs, data_samples = data['inputs'], data.get('data_samples')
        if training and self.size is not None:
            H, W = inputs.shape[-2:]
            d = self.pad_size_divisor
            th = math.ceil(max(H, self.size[0]) / d) * d
            tw = math.ceil(max(W, self.size[1]) / d) * d
            inputs = F.pad(inputs, (0, tw - W, 0, th - H), value=self.pad_value)
            data['inputs'] = inputs
        shape = tuple(inputs.shape[-2:])
        # one DataSample per image; without any (None / []) there is nothing to annotate
        for ds, img_shape in zip(data_samples or (), image_shapes if data_samples else (),
                                 strict=True):
            ds.set_metainfo(dict(batch_input_shape=shape, pad_shape=shape))
            if training and 'gt_sem_seg' in ds:
                ds.gt_sem_seg = self._pad_label(ds, img_shape, shape)
        return data

    def _pad_label(self, ds, img_shape, shape):
        seg = ds.gt_sem_seg.data
        if tuple(seg.shape[-2:]) != img_shape:
            raise ValueError(
                f"label map {ds.metainfo.get('seg_map_path', '')} is {tuple(seg.shape[-2:])} but "
                f"its image {ds.metainfo.get('img_path', '')} is {img_shape} after the training "
                'pipeline: every geometric transform must also apply to gt_seg_map')
        seg = F.pad(seg, (0, shape[1] - seg.shape[-1], 0, shape[0] - seg.shape[-2]),
                    value=self.seg_pad_val)
        return PixelData(data=seg)
