"""From Q (class, mask) predictions of one image to semantic, panoptic and instance
segmentations, by the rules of MaskFormer / Mask2Former (Cheng et al. 2021, Sec. 3.4; 2022),
which EoMT uses; outputs in MMDetection 3.x's data-sample conventions.

Inputs are one image's ``mask_logits`` [Q, H, W] (already at the size wanted) and
``class_logits`` [Q, K+1] (index K: no object).
"""
import torch

from densevit.structures.panoptic import INSTANCE_OFFSET


def semantic_scores(mask_logits, class_logits):
    """Per-class scores [K, H, W]: ``sum_q p_q(k) * sigmoid(m_q)``, the class probabilities
    (softmax over K+1, "no object" dropped) weighting each query's mask probability. Their
    argmax over k is the semantic segmentation (they are not normalised logits)."""
    probs = class_logits.softmax(-1)[..., :-1]
    return torch.einsum('qk,qhw->khw', probs, mask_logits.sigmoid())


def panoptic_segmentation(mask_logits, class_logits, num_things_classes,
                          object_threshold=0.8, overlap_threshold=0.8, convention='mask2former'):
    """Mask2Former's panoptic inference.

    Queries whose most likely class is an object with probability above
    ``object_threshold`` compete for pixels: each pixel goes to the query of largest
    ``p * sigmoid(m)``. A query keeps the pixels it won where its own mask is on
    (``sigmoid(m) >= 0.5``), unless it won less than ``overlap_threshold`` of its own mask's
    area (then it is dropped). Thing classes (below ``num_things_classes``) give one segment
    per query, numbered 1, 2, ... in query order; a stuff class gives one segment whatever
    the number of queries predicting it. ``convention``: see :func:`panoptic_from_scores`.

    Returns:
        [H, W] int64: ``label + instance * INSTANCE_OFFSET`` (instance 0 for stuff); K
        (``num_classes``) where no segment is (VOID).
    """
    scores, labels = class_logits.softmax(-1).max(-1)
    return panoptic_from_scores(mask_logits, scores, labels, class_logits.shape[-1] - 1,
                                num_things_classes, object_threshold, overlap_threshold,
                                convention)


def panoptic_from_scores(mask_logits, scores, labels, num_classes, num_things_classes,
                         object_threshold=0.8, overlap_threshold=0.8, convention='mask2former'):
    """:func:`panoptic_segmentation` from each query's score [Q] and label [Q] (``num_classes``
    = no object), whatever the classifier (softmax or sigmoid).

    ``convention='transformers'`` follows Hugging Face's ``post_process_panoptic_segmentation``
    of its DETR image processor instead (proven in tests/models/test_detr_panoptic_vs_hf.py),
    which differs in three places: a query's
    own mask is where ``p * sigmoid(m) >= 0.5``, it keeps every pixel it won, and it is
    dropped unless it won strictly more than ``overlap_threshold`` of its own mask's area.
    """
    if convention not in ('mask2former', 'transformers'):
        raise ValueError(f"panoptic convention must be 'mask2former' or 'transformers', got "
                         f'{convention!r}')
    keep = (labels != num_classes) & (scores > object_threshold)
    ids = torch.full(mask_logits.shape[-2:], num_classes, dtype=torch.int64,
                     device=mask_logits.device)
    if not keep.any():
        return ids
    scores, labels, probs = scores[keep], labels[keep], mask_logits[keep].sigmoid()
    weighted = scores[:, None, None] * probs
    owner = weighted.argmax(0)  # [H, W]
    hf = convention == 'transformers'
    segments = []
    for k, label in enumerate(labels.tolist()):
        won = owner == k
        own = (weighted if hf else probs)[k] >= 0.5
        won_area, own_area = int(won.sum()), int(own.sum())
        if won_area == 0 or own_area == 0:
            continue
        ratio = won_area / own_area
        if ratio <= overlap_threshold if hf else ratio < overlap_threshold:
            continue
        segments.append((won if hf else won & own, label))
    return paint_segments(ids, segments, num_things_classes)


def paint_segments(ids, segments, num_things_classes):
    """Write ``(region [H, W] bool, label)`` pairs into the map ``ids`` in order: a thing
    class (below ``num_things_classes``) as ``label + instance * INSTANCE_OFFSET``, its
    instances numbered 1, 2, ...; a stuff class as ``label`` (instance 0, so its regions are
    one segment). Returns ``ids``."""
    instance = 0
    for region, label in segments:
        if label < num_things_classes:
            instance += 1
            ids[region] = label + instance * INSTANCE_OFFSET
        else:
            ids[region] = label
    return ids


def mask_boxes(masks):
    """Bool masks [N, H, W] -> [N, 4] xyxy boxes around the on pixels (x2, y2 one past the
    last pixel); zeros for an empty mask."""
    boxes = masks.new_zeros((masks.shape[0], 4), dtype=torch.float32)
    for i, m in enumerate(masks):
        ys, xs = torch.where(m)
        if len(xs):
            boxes[i] = torch.stack([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]).float()
    return boxes


def instance_segmentation(mask_logits, class_logits, max_per_image=100, num_things_classes=None):
    """Mask2Former's instance inference: the ``max_per_image`` best (query, class) pairs by
    class probability (a query may appear with several classes), each scored by that
    probability times the mean mask probability over its mask (``m > 0``); with
    ``num_things_classes`` only thing classes are kept.

    Returns:
        dict: ``masks`` [M, H, W] bool, ``labels`` [M], ``scores`` [M], ``bboxes`` [M, 4] xyxy.
    """
    probs = class_logits.softmax(-1)[:, :-1]  # [Q, K]
    Q, K = probs.shape
    top = probs.flatten().topk(min(max_per_image, Q * K))
    labels, queries = top.indices % K, top.indices // K
    scores = top.values
    if num_things_classes is not None:
        things = labels < num_things_classes
        labels, queries, scores = labels[things], queries[things], scores[things]
    logits = mask_logits[queries]
    masks = logits > 0
    mask_scores = (logits.sigmoid() * masks).flatten(1).sum(1) / (masks.flatten(1).sum(1) + 1e-6)
    return dict(masks=masks, labels=labels, scores=scores * mask_scores,
                bboxes=mask_boxes(masks))
