"""Mask losses on sampled points (PointRend, Kirillov et al. 2020; Mask2Former, Cheng et al.
2022, Sec. 3.3 "Improving training efficiency").

A mask loss over every pixel of Q high-resolution masks is costly; Mask2Former computes it
at P points per mask instead (P = 112 x 112 = 12544): the matching cost at P points drawn
uniformly, shared by all predictions and targets of an image, and the loss of a matched pair
at P points chosen by *importance sampling*: kP candidates drawn uniformly, the
``int(r P)`` most uncertain of them kept (uncertainty: ``-|logit|``, highest where the
prediction is closest to 0.5), the rest drawn uniformly. Points are (x, y) in [0, 1] x [0, 1]
of the whole map, read by bilinear interpolation (``align_corners=False``), so predictions
and targets of different resolutions are compared at the same places without resizing.
"""
import torch
import torch.nn.functional as F


def point_sample(maps, points):
    """Bilinear values of maps at normalised points.

    Args:
        maps: [N, C, H, W].
        points: [N, P, 2], (x, y) in [0, 1] (0 and 1 the outer edges of the map).

    Returns:
        [N, C, P]; zero padding outside the map.
    """
    grid = (2.0 * points - 1.0).unsqueeze(2)  # [N, P, 1, 2] in grid_sample's [-1, 1]
    return F.grid_sample(maps, grid.to(maps.dtype), align_corners=False).squeeze(3)


def uncertain_points(logits, num_points, oversample_ratio, importance_sample_ratio, draws):
    """Mask2Former's importance sampling of the points where each mask is scored.

    Args:
        logits: [M, 1, H, W] mask logits.
        num_points (int): P points per mask.
        oversample_ratio (float): k: ``int(k P)`` candidates drawn uniformly.
        importance_sample_ratio (float): r: the ``int(r P)`` candidates of highest
            uncertainty ``-|logit|`` are kept, ``P - int(r P)`` further points drawn uniformly.
        draws: :class:`~densevit.utils.random_draws.UniformDraws` or a callable like it
            (names ``'oversampled_points'``, ``'random_points'``).

    Returns:
        [M, P, 2] points (x, y) in [0, 1], the uncertain ones first.
    """
    M = logits.shape[0]
    candidates = draws('oversampled_points', (M, int(num_points * oversample_ratio), 2),
                       logits.device, logits.dtype)
    uncertainty = -point_sample(logits, candidates).abs()[:, 0]  # [M, kP]
    num_uncertain = int(importance_sample_ratio * num_points)
    top = uncertainty.topk(num_uncertain, dim=1).indices  # [M, rP]
    points = torch.gather(candidates, 1, top.unsqueeze(-1).expand(-1, -1, 2))
    num_random = num_points - num_uncertain
    if num_random > 0:
        points = torch.cat([points, draws('random_points', (M, num_random, 2), logits.device,
                                          logits.dtype)], dim=1)
    return points


def sigmoid_bce(logits, targets):
    """Binary cross-entropy of sigmoid(logits) per element: [...] x [...] -> [...]."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction='none')


def dice_score_loss(probs, targets):
    """``1 - (2 sum(p t) + 1) / (sum p + sum t + 1)`` per mask (Milletari et al. 2016, the
    +1 smoothing of Mask2Former): probs, targets [M, P] -> [M]."""
    return 1 - (2 * (probs * targets).sum(-1) + 1) / (probs.sum(-1) + targets.sum(-1) + 1)


def pairwise_mask_costs(pred_logits, target_masks):
    """Every prediction against every target at the same P points.

    Args:
        pred_logits: [Q, P] mask logits at the points.
        target_masks: [N, P] target values at the points (in [0, 1]).

    Returns:
        (bce [Q, N], dice [Q, N]): the mean binary cross-entropy over the points, and the
        dice loss of :func:`dice_score_loss`, of each pair.
    """
    P = pred_logits.shape[-1]
    positive = sigmoid_bce(pred_logits, torch.ones_like(pred_logits))  # -log p
    negative = sigmoid_bce(pred_logits, torch.zeros_like(pred_logits))  # -log(1 - p)
    bce = (positive / P) @ target_masks.T + (negative / P) @ (1 - target_masks).T
    probs = pred_logits.sigmoid()
    dice = 1 - (2 * probs @ target_masks.T + 1) / (
        probs.sum(-1)[:, None] + target_masks.sum(-1)[None, :] + 1)
    return bce, dice


def point_mask_losses(pred_logits, target_masks, num_masks, num_points, oversample_ratio,
                      importance_sample_ratio, draws):
    """Mask BCE and dice of matched pairs on importance-sampled points.

    Args:
        pred_logits: [M, h, w] the matched predictions' mask logits.
        target_masks: [M, H, W] their targets (0 / 1, any resolution).
        num_masks (float): the normaliser (targets in the batch, averaged over processes).
        num_points, oversample_ratio, importance_sample_ratio, draws: see
            :func:`uncertain_points` (points chosen without gradient).

    Returns:
        (loss_mask, loss_dice): sums over the pairs of the per-pair mean BCE over the
        points and of the dice loss, each divided by ``num_masks``.
    """
    if pred_logits.shape[0] == 0:  # nothing matched: zero, still part of the graph
        zero = pred_logits.sum() * 0
        return zero, zero
    pred_logits = pred_logits.unsqueeze(1)  # [M, 1, h, w]
    with torch.no_grad():
        points = uncertain_points(pred_logits, num_points, oversample_ratio,
                                  importance_sample_ratio, draws)
        labels = point_sample(target_masks.unsqueeze(1).to(pred_logits.dtype), points)[:, 0]
    logits = point_sample(pred_logits, points)[:, 0]  # [M, P]
    loss_mask = sigmoid_bce(logits, labels).mean(1).sum() / num_masks
    loss_dice = dice_score_loss(logits.sigmoid(), labels).sum() / num_masks
    return loss_mask, loss_dice
