"""Panoptic maps (``densevit.structures.panoptic``: ``label + instance * INSTANCE_OFFSET``
per pixel, VOID = the number of classes) as the segments to draw."""
import numpy as np
from mmengine.structures import BaseDataElement

from densevit.structures.panoptic import INSTANCE_OFFSET


def panoptic_map(panoptic_seg):
    """int64 [H, W] of a panoptic map: ``PixelData`` holding ``sem_seg`` (predictions) or
    ``data`` (ground truth) [1, H, W], or a tensor / array [1, H, W] or [H, W]."""
    if isinstance(panoptic_seg, BaseDataElement):
        panoptic_seg = panoptic_seg.get('sem_seg', panoptic_seg.get('data'))
    if hasattr(panoptic_seg, 'detach'):
        panoptic_seg = panoptic_seg.detach().cpu().numpy()
    ids = np.asarray(panoptic_seg, np.int64)
    return ids.reshape(ids.shape[-2:])


def panoptic_segments(ids, num_classes=None, void=None):
    """The segments of an integer panoptic map ``ids`` [H, W], in increasing value (stuff
    first, then the things by instance number): ``(values, labels, instances)``, int64 [N]
    each. Left out as VOID: labels ``>= num_classes`` (when given), the value ``void``
    (when given) and negative values."""
    values = np.unique(ids)
    values = values[values >= 0]
    if void is not None:
        values = values[values != void]
    labels = values % INSTANCE_OFFSET
    if num_classes is not None:
        values, labels = values[labels < num_classes], labels[labels < num_classes]
    return values, labels, values // INSTANCE_OFFSET
