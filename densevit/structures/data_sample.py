"""``DataSample``: the one annotation/prediction container passed between parts.

Fields (all optional):
    gt_instances (InstanceData): ``bboxes`` [N, 4] xyxy pixels of the current
        (augmented) image, ``labels`` [N] contiguous 0..K-1; with instance masks
        also ``masks`` bool [N, H, W] (one bitmap per box, the image's size).
    ignored_instances (InstanceData): crowd / ignored boxes, never matched.
    pred_instances (InstanceData): ``bboxes`` [M, 4] xyxy pixels of the original
        image, ``scores`` [M], ``labels`` [M].
    gt_sem_seg / pred_sem_seg (PixelData): ``data`` [1, H, W] int class map, 255 = ignore.
    gt_panoptic_seg (PixelData): ``data`` [1, H, W] int64, ``label + instance *
        INSTANCE_OFFSET`` (:mod:`densevit.structures.panoptic`), VOID = metainfo
        ``ignore_index`` (num_classes).
    seg_logits (PixelData): ``data`` [C, H, W].
Metainfo: ``img_id``, ``img_path``, ``ori_shape`` (h, w), ``img_shape`` (h, w) after
resize, ``scale_factor`` (w, h), ``flip``, ``pad_shape``, ``batch_input_shape``.
"""
from mmengine.structures import BaseDataElement, InstanceData, PixelData


def _field(name, dtype):
    private = '_' + name

    def getter(self):
        return getattr(self, private)

    def setter(self, value):
        self.set_field(value, private, dtype=dtype)

    def deleter(self):
        delattr(self, private)

    return property(getter, setter, deleter)


class DataSample(BaseDataElement):
    """Ground truth and predictions for one image (detection and segmentation)."""

    gt_instances = _field('gt_instances', InstanceData)
    ignored_instances = _field('ignored_instances', InstanceData)
    pred_instances = _field('pred_instances', InstanceData)
    gt_sem_seg = _field('gt_sem_seg', PixelData)
    gt_panoptic_seg = _field('gt_panoptic_seg', PixelData)
    pred_sem_seg = _field('pred_sem_seg', PixelData)
    seg_logits = _field('seg_logits', PixelData)
