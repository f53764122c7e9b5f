"""Box operations on ``[..., 4]`` tensors.

Formats: ``xyxy`` = (x1, y1, x2, y2); ``cxcywh`` = (center x, center y, width, height).
Degenerate boxes (zero width or height, or x2 < x1 from an untrained head) give
finite IoU / GIoU: areas are clamped at 0 and denominators at ``eps``.
"""
import torch

EPS = 1e-7


def box_cxcywh_to_xyxy(boxes):
    """[..., 4] cxcywh -> [..., 4] xyxy."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def box_xyxy_to_cxcywh(boxes):
    """[..., 4] xyxy -> [..., 4] cxcywh."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def box_area(boxes):
    """[..., 4] xyxy -> [...] area, 0 for inverted boxes."""
    return (boxes[..., 2] - boxes[..., 0]).clamp(min=0) * (boxes[..., 3] - boxes[..., 1]).clamp(min=0)


def box_iou(boxes1, boxes2, eps=EPS):
    """Pairwise IoU of [N, 4] and [M, 4] xyxy boxes -> (iou [N, M], union [N, M])."""
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area1[:, None] + area2[None, :] - inter
    return inter / union.clamp(min=eps), union


def generalized_box_iou(boxes1, boxes2, eps=EPS):
    """Pairwise generalized IoU (Rezatofighi et al. 2019) of [N, 4] and [M, 4] xyxy -> [N, M].

    Lies in [-1, 1]; finite for degenerate boxes.
    """
    iou, union = box_iou(boxes1, boxes2, eps)
    lt = torch.min(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    enclosing = wh[..., 0] * wh[..., 1]
    return iou - (enclosing - union) / enclosing.clamp(min=eps)

