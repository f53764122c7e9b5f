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


def _iou_parts(boxes1, boxes2, eps):
    """Broadcast IoU of xyxy boxes [..., 4] and [..., 4] -> (iou [...], union [...])."""
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[..., :2], boxes2[..., :2])
    rb = torch.min(boxes1[..., 2:], boxes2[..., 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area1 + area2 - inter
    return inter / union.clamp(min=eps), union


def _giou(boxes1, boxes2, eps):
    """Broadcast generalized IoU of xyxy boxes [..., 4] and [..., 4] -> [...]."""
    iou, union = _iou_parts(boxes1, boxes2, eps)
    lt = torch.min(boxes1[..., :2], boxes2[..., :2])
    rb = torch.max(boxes1[..., 2:], boxes2[..., 2:])
    wh = (rb - lt).clamp(min=0)
    enclosing = wh[..., 0] * wh[..., 1]
    return iou - (enclosing - union) / enclosing.clamp(min=eps)


def box_iou(boxes1, boxes2, eps=EPS):
    """Pairwise IoU of [N, 4] and [M, 4] xyxy boxes -> (iou [N, M], union [N, M])."""
    return _iou_parts(boxes1[:, None], boxes2[None], eps)


def generalized_box_iou(boxes1, boxes2, eps=EPS):
    """Pairwise generalized IoU (Rezatofighi et al. 2019) of [N, 4] and [M, 4] xyxy -> [N, M].

    Lies in [-1, 1]; finite for degenerate boxes.
    """
    return _giou(boxes1[:, None], boxes2[None], eps)


def aligned_box_iou(boxes1, boxes2, eps=EPS):
    """IoU of each pair of rows of [N, 4] and [N, 4] xyxy boxes -> [N]."""
    return _iou_parts(boxes1, boxes2, eps)[0]


def aligned_generalized_box_iou(boxes1, boxes2, eps=EPS):
    """Generalized IoU of each pair of rows of [N, 4] and [N, 4] xyxy boxes -> [N] (the
    diagonal of :func:`generalized_box_iou` without the [N, N] matrix)."""
    return _giou(boxes1, boxes2, eps)


def box_centers(boxes):
    """[..., 4] xyxy -> [..., 2] centre (x, y)."""
    return torch.stack([(boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2],
                       dim=-1)


def decode_deltas(anchors, deltas, stds=(0.1, 0.1, 0.2, 0.2), max_log_ratio=4.135166556742356):
    """R-CNN's box deltas (Girshick et al. 2014) on anchors -> xyxy boxes.

    Args:
        anchors (Tensor): [N, 4] xyxy.
        deltas (Tensor): [N, 4] (dx, dy, dw, dh) divided by ``stds``: the centre moves by
            (dx·w, dy·h), the sides scale by exp(dw), exp(dh).
        stds (tuple): the deltas' scale per coordinate ((0.1, 0.1, 0.2, 0.2): ATSS's, Co-DETR's).
        max_log_ratio (float): |dw|, |dh| clamped to it (|log(16 / 1000)|: a side grows or
            shrinks at most 62.5 times).

    Returns:
        Tensor: [N, 4] xyxy boxes (not clipped to the image).
    """
    d = deltas * deltas.new_tensor(stds)
    centre = (anchors[:, :2] + anchors[:, 2:]) * 0.5
    size = anchors[:, 2:] - anchors[:, :2]
    centre = centre + size * d[:, :2]
    size = size * d[:, 2:].clamp(min=-max_log_ratio, max=max_log_ratio).exp()
    return torch.cat([centre - size * 0.5, centre + size * 0.5], dim=-1)
