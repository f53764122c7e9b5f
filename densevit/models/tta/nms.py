"""Class-wise non-maximum suppression in plain torch (no compiled ops), and box flips.

Semantics follow mmcv's ``batched_nms`` / ``nms`` as MMDetection's ``DetTTAModel`` uses
them: boxes sorted by score (highest first), a box is dropped when its IoU with a kept
box **of the same class** is strictly greater than ``iou_threshold``; IoU with zero
offset (area ``(x2 - x1) * (y2 - y1)``). The kept boxes come out highest score first.
"""
import torch

from densevit.structures.bbox import box_iou


def batched_nms(boxes, scores, labels, iou_threshold=0.5):
    """Greedy class-wise NMS.

    Args:
        boxes: [N, 4] xyxy; scores: [N]; labels: [N] int (boxes of different labels
            never suppress each other).
        iou_threshold (float): suppress when IoU > this.

    Returns:
        keep: [M] long indices into the inputs, by descending score (ties: input order).
    """
    if not boxes.numel():
        return boxes.new_zeros(0, dtype=torch.long)
    order = scores.argsort(descending=True, stable=True)
    boxes, labels = boxes[order].float(), labels[order]
    # [N, N]: would i (higher score) suppress j? Same class and overlapping enough
    over = (box_iou(boxes, boxes)[0] > iou_threshold) & (labels[:, None] == labels[None, :])
    keep = torch.ones(len(order), dtype=torch.bool, device=boxes.device)
    for i in range(len(order)):  # in score order: a kept box removes its later overlaps
        if keep[i]:
            keep[i + 1:] &= ~over[i, i + 1:]
    return order[keep]


def flip_boxes(boxes, img_shape, direction='horizontal'):
    """Mirror xyxy boxes [N, 4] inside an image of ``img_shape`` (h, w): the inverse of
    mmcv's ``RandomFlip`` on boxes (``x1' = w - x2``), its own inverse too."""
    h, w = img_shape[:2]
    x1, y1, x2, y2 = boxes.unbind(-1)
    if direction in ('horizontal', 'diagonal'):
        x1, x2 = w - x2, w - x1
    if direction in ('vertical', 'diagonal'):
        y1, y2 = h - y2, h - y1
    if direction not in ('horizontal', 'vertical', 'diagonal'):
        raise ValueError(f'densevit/models/tta/nms.py: unknown flip_direction {direction!r}')
    return torch.stack([x1, y1, x2, y2], -1)
