"""Packing a detection sample for the model: ``dict(inputs, data_samples)``."""
import numpy as np
import torch
from mmcv.transforms import BaseTransform
from mmengine.structures import InstanceData, PixelData

from densevit.datasets.transforms.loading import DataError
from densevit.registry import TRANSFORMS
from densevit.structures import DataSample


def image_to_tensor(img):
    """An ``[H, W, C]`` (or ``[H, W]``) image array as a ``[C, H, W]`` tensor, same dtype."""
    if img.ndim == 2:
        img = img[..., None]
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


def map_to_pixel_data(seg, **metainfo):
    """An [H, W] integer map as ``PixelData(data=int64 [1, H, W])`` with ``metainfo``."""
    data = torch.from_numpy(np.ascontiguousarray(seg).astype(np.int64))[None]
    return PixelData(data=data, metainfo=metainfo)


def check_map_size(results, key):
    """Refuse ``results[key]`` (masks [N, H, W] or a map [H, W]) unless its size is the
    image's, or the original image's when it was loaded after a test-time Resize
    (``gt_at_ori_shape``, set by the loading transforms)."""
    shape = tuple(results[key].shape[-2:])
    img = tuple(results['img'].shape[:2])
    expected = tuple(results['ori_shape'][:2]) if results.get('gt_at_ori_shape') else img
    if shape == expected:
        return
    raise DataError(
        f'{results.get("img_path", "an image")}: {key} is {shape[0]}x{shape[1]} but the '
        f'image is {img[0]}x{img[1]} (HxW) after the pipeline: a transform moved the image '
        f"but not {key} (densevit's Resize, RandomFlip, RandomCrop move both; mmcv's Pad "
        'and CenterCrop do not)')


@TRANSFORMS.register_module()
class PackDetInputs(BaseTransform):
    """Pack ``img`` and the ``gt_*`` arrays into a tensor and a :class:`DataSample`.

    Returns ``dict(inputs, data_samples)``:
        inputs: tensor [C, H, W], the image's dtype (uint8 BGR as loaded), channels
            unchanged (normalisation and batching belong to the data preprocessor).
        data_samples: DataSample with, when ``gt_bboxes`` is present,
            ``gt_instances`` (``bboxes`` float32 [N, 4] xyxy pixels of the current image,
            ``labels`` int64 [N]) for boxes whose ``gt_ignore_flags`` is False and
            ``ignored_instances`` (same fields) for the others, each with ``masks``
            (bool [N, H, W]) when ``gt_masks`` is present; ``gt_sem_seg`` from
            ``gt_seg_map`` and ``gt_panoptic_seg`` (metainfo ``ignore_index``: its VOID
            value) when present; metainfo: the ``meta_keys`` found in results (shapes as
            (h, w) tuples; ``scale_factor`` (w_scale, h_scale) as written by mmcv's Resize).

    Masks and maps must have the image's size (a training pipeline's transforms move
    them with it); in a test pipeline that loads them after the ``Resize`` they keep the
    original image's size (``ori_shape``), like the label maps of segmentation.
    """

    def __init__(self, meta_keys=('img_id', 'img_path', 'seg_map_path', 'ori_shape', 'img_shape',
                                  'scale_factor', 'flip', 'flip_direction')):
        self.meta_keys = tuple(meta_keys)

    def transform(self, results):
        inputs = image_to_tensor(results['img'])
        for key in ('gt_masks', 'gt_seg_map', 'gt_panoptic_seg'):
            if results.get(key) is not None:
                check_map_size(results, key)

        sample = DataSample()
        if 'gt_bboxes' in results:
            bboxes = np.asarray(results['gt_bboxes'], np.float32).reshape(-1, 4)
            labels = np.asarray(results.get('gt_bboxes_labels', np.zeros(len(bboxes))), np.int64)
            ignore = np.asarray(results.get('gt_ignore_flags', np.zeros(len(bboxes))), bool)
            masks = results.get('gt_masks')
            if masks is not None and len(masks) != len(bboxes):
                raise DataError(f'{results.get("img_path", "an image")}: {len(masks)} masks '
                                f'for {len(bboxes)} boxes after the pipeline: a transform '
                                'dropped boxes without their masks')
            for field, keep in (('gt_instances', ~ignore), ('ignored_instances', ignore)):
                fields = dict(bboxes=torch.from_numpy(bboxes[keep]),
                              labels=torch.from_numpy(labels[keep]))
                if masks is not None:
                    fields['masks'] = torch.from_numpy(np.ascontiguousarray(masks[keep]))
                setattr(sample, field, InstanceData(**fields))
        if results.get('gt_seg_map') is not None:
            sample.gt_sem_seg = map_to_pixel_data(results['gt_seg_map'])
        if results.get('gt_panoptic_seg') is not None:
            void = results.get('panoptic_void')
            sample.gt_panoptic_seg = map_to_pixel_data(
                results['gt_panoptic_seg'], **({} if void is None else dict(ignore_index=void)))
        meta = {}
        for key in self.meta_keys:
            if key in results:
                value = results[key]
                meta[key] = tuple(int(v) for v in value) if key.endswith('shape') else value
        sample.set_metainfo(meta)
        return dict(inputs=inputs, data_samples=sample)

    def __repr__(self):
        return f'{self.__class__.__name__}(meta_keys={self.meta_keys})'
