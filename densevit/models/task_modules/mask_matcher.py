"""Hungarian matching of mask predictions to ground-truth masks (MaskFormer / Mask2Former,
Cheng et al. 2021 / 2022; EoMT, Kerssies et al. 2025), the costs computed on sampled points."""
import torch

from densevit.models.losses.point_loss import pairwise_mask_costs, point_sample
from densevit.registry import TASK_UTILS
from densevit.utils.precision import at_least_fp32
from densevit.utils.random_draws import UniformDraws

from .hungarian_matcher import assign


@TASK_UTILS.register_module()
class HungarianMaskMatcher:
    """One-to-one assignment of queries to target masks minimising, per image,
    ``cost_class * (-p(class)) + cost_mask * BCE + cost_dice * dice``.

    p is the softmax class probability of the target's class; BCE (mean over points) and
    dice are those of the query's mask against the target's at ``num_points`` points drawn
    uniformly over the image, the same points for every query and target of the image
    (:func:`~densevit.models.losses.point_loss.pairwise_mask_costs`). Masks of different
    resolutions (the predictions' and the labels') are read at the same normalised places.

    Args:
        cost_class, cost_mask, cost_dice (float): the weights (Mask2Former / EoMT: 2, 5, 5).
        num_points (int): P points per image (112 * 112 = 12544).
    """

    def __init__(self, cost_class=2.0, cost_mask=5.0, cost_dice=5.0, num_points=12544):
        if cost_class == 0 and cost_mask == 0 and cost_dice == 0:
            raise ValueError('HungarianMaskMatcher: all costs are 0')
        self.cost_class, self.cost_mask, self.cost_dice = cost_class, cost_mask, cost_dice
        self.num_points = num_points

    def cost_matrix(self, mask_logits, class_logits, labels, masks, points):
        """[Q, N] cost of one image: mask_logits [Q, h, w], class_logits [Q, K+1], labels
        [N], masks [N, H, W], points [P, 2] (x, y) in [0, 1]."""
        Q, N = mask_logits.shape[0], masks.shape[0]
        pred = point_sample(mask_logits[:, None], points.expand(Q, -1, -1))[:, 0]  # [Q, P]
        target = point_sample(masks[:, None].to(pred.dtype), points.expand(N, -1, -1))[:, 0]
        bce, dice = pairwise_mask_costs(pred, target)
        prob = class_logits.softmax(-1)[:, labels]  # [Q, N]
        return self.cost_mask * bce - self.cost_class * prob + self.cost_dice * dice

    @torch.no_grad()
    def __call__(self, mask_logits, class_logits, targets, draws=None):
        """Match a batch.

        Args:
            mask_logits: [B, Q, h, w].
            class_logits: [B, Q, K+1] (index K: no object).
            targets (list[dict]): per image ``labels`` [N_i] long and ``masks`` [N_i, H, W]
                (bool or 0 / 1, one size for the batch).
            draws: the source of the points (``'match_points'``, [P, 2] per image with
                targets); default ``torch.rand``.

        Returns:
            list[tuple[Tensor, Tensor]]: per image (query indices, target indices), int64,
            each of length min(Q, N_i), the queries in increasing order.
        """
        draws = draws or UniformDraws()
        mask_logits, class_logits = at_least_fp32(mask_logits), at_least_fp32(class_logits)
        indices = []
        for masks, logits, t in zip(mask_logits, class_logits, targets, strict=True):
            if len(t['labels']) == 0:
                indices.append(assign(None))
                continue
            points = draws('match_points', (self.num_points, 2), masks.device, masks.dtype)
            cost = self.cost_matrix(masks, logits, t['labels'].to(masks.device),
                                    t['masks'].to(masks.device), points)
            indices.append(assign(cost, type(self).__name__, 'masks or class logits'))
        return indices

    def __repr__(self):
        return (f'{type(self).__name__}(cost_class={self.cost_class}, cost_mask={self.cost_mask}, '
                f'cost_dice={self.cost_dice}, num_points={self.num_points})')
