"""DETR's panoptic inference (Carion et al. 2020, Sec. 4.4 "Panoptic segmentation" and its
code's ``PostProcessPanoptic``): from the queries' classes and mask logits of one image to a
panoptic map in densevit's convention (``label + instance * INSTANCE_OFFSET``, VOID = K,
:mod:`densevit.structures.panoptic`).

The rule: queries predicting "no object", or a class with a score of at most the threshold
(0.85), are dropped; every pixel goes to the kept query of highest mask logit (DETR's
arg-max over the masks, no score weighting and no mask threshold, so the kept queries cover
the whole image); the queries of one stuff class form one segment; a segment of fewer than
``min_area`` pixels (DETR: at most 4) is dropped with its queries and the arg-max retaken
over the rest, until none is left that small.
"""
import torch

from ..segmentors.mask_postprocess import paint_segments


def query_classes(class_logits, num_classes):
    """(score [Q], label [Q]) of each query: from a softmax over K+1 logits ([Q, K+1], the
    last "no object", which may win: label K) or, for a sigmoid classifier ([Q, K], focal
    loss heads), the best class's sigmoid."""
    if class_logits.shape[-1] == num_classes + 1:
        return class_logits.softmax(-1).max(-1)
    if class_logits.shape[-1] == num_classes:
        return class_logits.sigmoid().max(-1)
    raise ValueError(f'class logits of {class_logits.shape[-1]} classes for a model of '
                     f'{num_classes}')


def detr_panoptic_segmentation(mask_logits, scores, labels, num_classes, num_things_classes,
                               threshold=0.85, min_area=5):
    """One image's panoptic map by DETR's rule (see the module docstring).

    Args:
        mask_logits: [Q, H, W] every query's mask logits at the output size.
        scores, labels: [Q] each query's class score and label (``num_classes``: no object).
        num_classes (int): K; num_things_classes (int): the thing classes (labels below it).
        threshold (float): kept queries score above it (0.85).
        min_area (int): segments of fewer pixels are dropped (5: DETR drops those of at most 4).

    Returns:
        [H, W] int64: things numbered 1, 2, ... in query order; stuff instance 0; VOID (K)
        where no query is kept.
    """
    kept = torch.nonzero((labels < num_classes) & (scores > threshold))[:, 0]
    ids = torch.full(mask_logits.shape[-2:], num_classes, dtype=torch.int64,
                     device=mask_logits.device)
    while len(kept):
        owner = mask_logits[kept].argmax(0)  # [H, W]: a position in ``kept``
        segment = _segment_of_query(labels[kept], num_classes, num_things_classes)
        area = torch.bincount(segment[owner].flatten(), minlength=2 * num_classes + len(kept))
        small = area[segment] < min_area
        if not small.any():
            break
        kept = kept[~small]
    else:
        return ids
    return paint_segments(ids, [(owner == k, label) for k, label in
                                enumerate(labels[kept].tolist())], num_things_classes)


def _segment_of_query(labels, num_classes, num_things_classes):
    """[N] the segment each query paints: a stuff query its class (shared by the class's
    queries), a thing query one of its own (``2K + its position``)."""
    own = torch.arange(len(labels), device=labels.device) + 2 * num_classes
    return torch.where(labels < num_things_classes, own, labels)
