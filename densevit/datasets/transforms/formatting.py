"""Packing a detection sample for the model: ``dict(inputs, data_samples)``."""
import numpy as np
import torch
from mmcv.transforms import BaseTransform
from mmengine.structures import InstanceData

from densevit.registry import TRANSFORMS
from densevit.structures import DataSample


def image_to_tensor(img):
    """An ``[H, W, C]`` (or ``[H, W]``) image array as a ``[C, H, W]`` tensor, same dtype."""
    if img.ndim == 2:
        img = img[..., None]
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


@TRANSFORMS.register_module()
class PackDetInputs(BaseTransform):
    """Pack ``img`` and the ``gt_*`` arrays into a tensor and a :class:`DataSample`.

    Returns ``dict(inputs, data_samples)``:
        inputs: tensor [C, H, W], the image's dtype (uint8 BGR as loaded), channels
            unchanged (normalisation and batching belong to the data preprocessor).
        data_samples: DataSample with, when ``gt_bboxes`` is present,
            ``gt_instances`` (``bboxes`` float32 [N, 4] xyxy pixels of the current image,
            ``labels`` int64 [N]) for boxes whose ``gt_ignore_flags`` is False and
            ``ignored_instances`` (same fields) for the others; metainfo: the
            ``meta_keys`` found in results (shapes as (h, w) tuples; ``scale_factor``
            (w_scale, h_scale) as written by mmcv's Resize).
    """

    def __init__(self, meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
                                  'flip', 'flip_direction')):
        self.meta_keys = tuple(meta_keys)

    def transform(self, results):
        inputs = image_to_tensor(results['img'])

        sample = DataSample()
        if 'gt_bboxes' in results:
            bboxes = np.asarray(results['gt_bboxes'], np.float32).reshape(-1, 4)
            labels = np.asarray(results.get('gt_bboxes_labels', np.zeros(len(bboxes))), np.int64)
            ignore = np.asarray(results.get('gt_ignore_flags', np.zeros(len(bboxes))), bool)
            for field, keep in (('gt_instances', ~ignore), ('ignored_instances', ignore)):
                setattr(sample, field, InstanceData(bboxes=torch.from_numpy(bboxes[keep]),
                                                    labels=torch.from_numpy(labels[keep])))
        meta = {}
        for key in self.meta_keys:
            if key in results:
                value = results[key]
                meta[key] = tuple(int(v) for v in value) if key.endswith('shape') else value
        sample.set_metainfo(meta)
        return dict(inputs=inputs, data_samples=sample)

    def __repr__(self):
        return f'{self.__class__.__name__}(meta_keys={self.meta_keys})'
