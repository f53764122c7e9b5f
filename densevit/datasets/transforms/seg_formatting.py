"""Packing a segmentation sample for the model: ``dict(inputs, data_samples)``."""
from mmcv.transforms import BaseTransform

from densevit.registry import TRANSFORMS
from densevit.structures import DataSample

from .formatting import image_to_tensor, map_to_pixel_data


@TRANSFORMS.register_module()
class PackSegInputs(BaseTransform):
    """Pack ``img`` and ``gt_seg_map`` into a tensor and a :class:`DataSample`.

    Returns ``dict(inputs, data_samples)``:
        inputs: tensor [C, H, W], the image's dtype (uint8 BGR as loaded); normalisation
            and batching belong to the data preprocessor.
        data_samples: DataSample with ``gt_sem_seg`` (PixelData, ``data`` int64
            [1, H, W], 255 = ignore) when ``gt_seg_map`` is present; metainfo: the
            ``meta_keys`` found in results (shapes as (h, w) tuples).
    """

    def __init__(self, meta_keys=('img_path', 'seg_map_path', 'ori_shape', 'img_shape',
                                  'pad_shape', 'scale_factor', 'flip', 'flip_direction',
                                  'reduce_zero_label')):
        self.meta_keys = tuple(meta_keys)

    def transform(self, results):
        inputs = image_to_tensor(results['img'])
        sample = DataSample()
        if results.get('gt_seg_map') is not None:
            sample.gt_sem_seg = map_to_pixel_data(results['gt_seg_map'])
        meta = {}
        for key in self.meta_keys:
            if key in results:
                value = results[key]
                meta[key] = tuple(int(v) for v in value[:2]) if key.endswith('shape') else value
        sample.set_metainfo(meta)
        return dict(inputs=inputs, data_samples=sample)

    def __repr__(self):
        return f'{self.__class__.__name__}(meta_keys={self.meta_keys})'
