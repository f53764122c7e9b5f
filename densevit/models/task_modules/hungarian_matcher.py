"""Hungarian matching of DETR's set predictions to ground truth (Carion et al. 2020, §3.1)."""
import torch
from scipy.optimize import linear_sum_assignment

from densevit.registry import TASK_UTILS
from densevit.structures import box_cxcywh_to_xyxy, generalized_box_iou
from densevit.utils.precision import at_least_fp32


def assign(cost, who='HungarianMatcher', what='predictions'):
    """The one-to-one assignment of least total cost of one image (scipy's
    ``linear_sum_assignment``).

    Args:
        cost (Tensor | None): [Q, N] cost of prediction q for target n; None or N = 0: no
            targets.
        who, what (str): named in the error on a non-finite cost.

    Returns:
        tuple[Tensor, Tensor]: (prediction indices, target indices), int64 on the CPU, each
        of length min(Q, N), the predictions in increasing order.
    """
    empty = torch.empty(0, dtype=torch.int64)
    if cost is None or cost.shape[-1] == 0:
        return empty, empty
    cost = cost.detach().cpu()
    if not torch.isfinite(cost).all():
        raise FloatingPointError(f'{who}: the matching cost holds NaN or inf (non-finite '
                                 f'predicted {what})')
    rows, cols = linear_sum_assignment(cost.numpy())
    return (torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64))


@TASK_UTILS.register_module()
class HungarianMatcher:
    """One-to-one assignment minimising cost_class·(−p(class)) + cost_bbox·L1 + cost_giou·(−GIoU).

    The cost matrix of the whole batch is built in one operation ([B·Q, ΣN]); only
    the per-image assignment (``scipy.optimize.linear_sum_assignment``) runs on CPU.

    Args:
        cost_class, cost_bbox, cost_giou (float): weights of the three costs (DETR: 1, 5, 2).
        use_sigmoid (bool): class probabilities by sigmoid (focal-loss heads) instead of softmax.
        focal (bool): Deformable DETR's class cost for focal-loss heads (implies sigmoid):
            the focal loss of calling the prediction positive minus that of calling it
            negative, ``α(1−p)^γ(−log p) − (1−α)p^γ(−log(1−p))``.
        focal_alpha, focal_gamma (float): α (0.25) and γ (2) of that cost.
    """

    def __init__(self, cost_class=1.0, cost_bbox=5.0, cost_giou=2.0, use_sigmoid=False,
                 focal=False, focal_alpha=0.25, focal_gamma=2.0):
        if cost_class == 0 and cost_bbox == 0 and cost_giou == 0:
            raise ValueError('HungarianMatcher: all costs are 0')
        self.cost_class = cost_class
        self.cost_bbox = cost_bbox
        self.cost_giou = cost_giou
        self.use_sigmoid = use_sigmoid or focal
        self.focal, self.focal_alpha, self.focal_gamma = focal, focal_alpha, focal_gamma

    def cost_matrix(self, outputs, targets):
        """[B, Q, ΣN] matching cost of every prediction against every target of the batch."""
        logits, boxes = outputs['pred_logits'], outputs['pred_boxes']
        B, Q = logits.shape[:2]
        prob = at_least_fp32(logits.flatten(0, 1))  # costs in float32 (float64 model: float64)
        prob = prob.sigmoid() if self.use_sigmoid else prob.softmax(-1)
        out_boxes = at_least_fp32(boxes.flatten(0, 1))
        tgt_labels = torch.cat([t['labels'] for t in targets]).long()
        tgt_boxes = torch.cat([t['boxes'] for t in targets]).to(out_boxes)
        if self.focal:
            p = prob[:, tgt_labels]
            a, g = self.focal_alpha, self.focal_gamma
            pos = a * (1 - p) ** g * -(p + 1e-8).log()
            neg = (1 - a) * p ** g * -(1 - p + 1e-8).log()
            cost = (pos - neg) * self.cost_class
        else:
            cost = -prob[:, tgt_labels] * self.cost_class
        cost = cost + self.cost_bbox * torch.cdist(out_boxes, tgt_boxes, p=1)
        cost = cost - self.cost_giou * generalized_box_iou(
            box_cxcywh_to_xyxy(out_boxes), box_cxcywh_to_xyxy(tgt_boxes))
        return cost.view(B, Q, -1)

    @torch.no_grad()
    def __call__(self, outputs, targets):
        """Match a batch.

        Args:
            outputs (dict): ``pred_logits`` [B, Q, K+1] (or [B, Q, K] with sigmoid),
                ``pred_boxes`` [B, Q, 4] normalized cxcywh.
            targets (list[dict]): per image ``labels`` [N_i] and ``boxes`` [N_i, 4]
                normalized cxcywh.

        Returns:
            list[tuple[Tensor, Tensor]]: per image (prediction indices, target indices),
            int64, each of length min(Q, N_i); empty for an image without targets.
        """
        sizes = [len(t['labels']) for t in targets]
        if sum(sizes) == 0:
            return [assign(None) for _ in targets]
        cost = self.cost_matrix(outputs, targets).cpu()
        return [assign(c[i], 'HungarianMatcher', 'boxes or logits')
                for i, c in enumerate(cost.split(sizes, -1))]

    def __repr__(self):
        return (f'{self.__class__.__name__}(cost_class={self.cost_class}, '
                f'cost_bbox={self.cost_bbox}, cost_giou={self.cost_giou})')
