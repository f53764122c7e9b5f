"""ATSS: Adaptive Training Sample Selection (Zhang et al. 2020, "Bridging the Gap Between
Anchor-based and Anchor-free Detection", Algorithm 1)."""
import torch

from densevit.registry import TASK_UTILS
from densevit.structures import box_centers, box_iou


@TASK_UTILS.register_module()
class ATSSAssigner:
    """Each ground-truth box picks its positive anchors by statistics of their IoUs.

    For every box: on each level the ``topk`` anchors whose centres are nearest to the box's
    centre (L2) are candidates; the IoU threshold is the mean plus the (unbiased) standard
    deviation of the candidates' IoUs; a candidate is positive if its IoU reaches the
    threshold and its centre lies inside the box (more than 0.01 from every side). An
    anchor positive for several boxes goes to the one of highest IoU (the first on a tie).

    Args:
        topk (int): candidates per level and box (9); a level with fewer anchors gives all.
    """

    def __init__(self, topk=9):
        self.topk = topk

    def __call__(self, anchors, num_level_anchors, gt_boxes):
        """Assign the anchors of one image.

        Args:
            anchors (Tensor): [A, 4] xyxy, level by level.
            num_level_anchors (list[int]): the anchors of each level (summing to A).
            gt_boxes (Tensor): [G, 4] xyxy, same units as the anchors.

        Returns:
            tuple[Tensor, Tensor]: ``assigned`` [A] int64, the index of each anchor's box or
            -1 (negative); ``iou`` [A, G], the anchors' IoU with every box.
        """
        A, G = anchors.shape[0], gt_boxes.shape[0]
        assigned = torch.full((A,), -1, dtype=torch.int64, device=anchors.device)
        iou = box_iou(anchors, gt_boxes)[0]
        if A == 0 or G == 0:
            return assigned, iou
        anchor_xy, gt_xy = box_centers(anchors), box_centers(gt_boxes)
        distance = (anchor_xy[:, None, :] - gt_xy[None, :, :]).pow(2).sum(-1).sqrt()  # [A, G]
        candidates, start = [], 0
        for n in num_level_anchors:
            nearest = distance[start:start + n].topk(min(self.topk, n), dim=0, largest=False)[1]
            candidates.append(nearest + start)
            start += n
        candidates = torch.cat(candidates)  # [C, G]
        cand_iou = iou.gather(0, candidates)
        threshold = cand_iou.mean(0) + cand_iou.std(0)
        cx, cy = anchor_xy[candidates, 0], anchor_xy[candidates, 1]  # [C, G]
        inside = torch.stack([cx - gt_boxes[:, 0], cy - gt_boxes[:, 1],
                              gt_boxes[:, 2] - cx, gt_boxes[:, 3] - cy]).min(0)[0] > 0.01
        positive = (cand_iou >= threshold[None]) & inside
        # [A, G]: a box's IoU where the anchor is its positive, else -inf
        pos_iou = torch.full_like(iou, float('-inf'))
        gt_idx = torch.arange(G, device=anchors.device).expand_as(candidates)
        pos_iou[candidates[positive], gt_idx[positive]] = cand_iou[positive]
        best, best_gt = pos_iou.max(1)
        matched = best > float('-inf')
        assigned[matched] = best_gt[matched]
        return assigned, iou
