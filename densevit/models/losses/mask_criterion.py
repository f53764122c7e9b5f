"""The mask-classification set loss of Mask2Former (Cheng et al. 2022) as EoMT (Kerssies et
al. 2025) trains with it: Hungarian matching on class + mask costs, then class cross-entropy
for every query and mask losses on sampled points for the matched ones."""
import torch
from torch import nn

from densevit.registry import MODELS, TASK_UTILS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import at_least_fp32
from densevit.utils.random_draws import UniformDraws

from .point_loss import point_mask_losses
from .set_criterion import matched_classes, matched_queries, no_object_cross_entropy


def head_criterion(criterion, num_classes, head):
    """A mask head's criterion config: ``criterion`` (``DEFAULT``: ``MaskSetCriterion``) with
    the head's ``num_classes`` filled in; another class count is refused, naming ``head``."""
    criterion = resolve_default(criterion, dict(type='MaskSetCriterion'))
    criterion.setdefault('num_classes', num_classes)
    if criterion['num_classes'] != num_classes:
        raise ValueError(f"{head}: criterion.num_classes={criterion['num_classes']} but "
                         f'num_classes={num_classes}')
    return criterion


@MODELS.register_module()
class MaskSetCriterion(nn.Module):
    """Hungarian-matched class and mask losses of one set of Q mask predictions.

    - ``loss_cls``: softmax cross-entropy over K+1 classes of every query (an unmatched
      query's target is "no object", index K, weighted ``no_object_weight``), the weighted
      mean;
    - ``loss_mask``: binary cross-entropy of each matched query's mask against its target's,
      averaged over ``num_points`` importance-sampled points
      (:func:`~densevit.models.losses.point_loss.point_mask_losses`), summed over matched
      pairs and divided by the number of targets;
    - ``loss_dice``: the dice loss of the same pairs at the same points, summed and divided
      likewise.

    Args:
        num_classes (int): K.
        matcher (dict): a ``TASK_UTILS`` config; default ``HungarianMaskMatcher`` with the
            loss weights as costs and this criterion's ``num_points``.
        loss_weights (dict): ``loss_cls``, ``loss_mask``, ``loss_dice``; EoMT's and
            Mask2Former's ``dict(loss_cls=2.0, loss_mask=5.0, loss_dice=5.0)``.
        no_object_weight (float): class weight of "no object" (``eos_coefficient``, 0.1).
        num_points (int): P points per mask (12544).
        oversample_ratio (float): k, candidates ``int(k P)`` (3.0).
        importance_sample_ratio (float): r, the share of points chosen by uncertainty (0.75).
    """

    def __init__(self, num_classes, matcher=DEFAULT, loss_weights=DEFAULT, no_object_weight=0.1,
                 num_points=12544, oversample_ratio=3.0, importance_sample_ratio=0.75):
        super().__init__()
        loss_weights = resolve_default(loss_weights,
                                       dict(loss_cls=2.0, loss_mask=5.0, loss_dice=5.0))
        matcher = resolve_default(matcher, dict(
            type='HungarianMaskMatcher', cost_class=loss_weights['loss_cls'],
            cost_mask=loss_weights['loss_mask'], cost_dice=loss_weights['loss_dice']))
        if matcher.get('type') == 'HungarianMaskMatcher':
            matcher.setdefault('num_points', num_points)
        if not 0 <= importance_sample_ratio <= 1 or oversample_ratio < importance_sample_ratio:
            raise ValueError(f'MaskSetCriterion: importance_sample_ratio must be in [0, 1] and '
                             f'at most oversample_ratio; got {importance_sample_ratio} and '
                             f'{oversample_ratio}')
        self.num_classes = num_classes
        self.matcher = TASK_UTILS.build(matcher)
        self.loss_weights = dict(loss_weights)
        self.no_object_weight = no_object_weight
        self.num_points = num_points
        self.oversample_ratio = oversample_ratio
        self.importance_sample_ratio = importance_sample_ratio

    def forward(self, mask_logits, class_logits, targets, num_masks, draws=None, indices=None):
        """Weighted losses of one prediction set.

        Args:
            mask_logits: [B, Q, h, w].
            class_logits: [B, Q, K+1].
            targets (list[dict]): per image ``labels`` [N_i] and ``masks`` [N_i, H, W].
            num_masks (float): normaliser of the mask losses (targets in the batch, averaged
                over processes, at least 1).
            draws: the source of the random points
                (:class:`~densevit.utils.random_draws.UniformDraws` by default).
            indices (list[tuple]): a given assignment; matched here when None.

        Returns:
            dict: ``loss_cls``, ``loss_mask``, ``loss_dice`` (already weighted).
        """
        draws = draws or UniformDraws()
        if indices is None:
            indices = self.matcher(mask_logits, class_logits, targets, draws)
        # losses in float32 at least: bf16 / fp16 logits raised, a float64 model stays float64
        mask_logits, class_logits = at_least_fp32(mask_logits), at_least_fp32(class_logits)
        target_classes = matched_classes(class_logits, indices, targets, self.num_classes)
        loss_cls = no_object_cross_entropy(class_logits, target_classes, self.no_object_weight)
        pred = mask_logits[matched_queries(indices)]  # [M, h, w]
        target = torch.cat([t['masks'][j.to(t['masks'].device)]
                            for t, (_, j) in zip(targets, indices, strict=True)])
        loss_mask, loss_dice = point_mask_losses(
            pred, target, num_masks, self.num_points, self.oversample_ratio,
            self.importance_sample_ratio, draws)
        w = self.loss_weights
        return dict(loss_cls=loss_cls * w['loss_cls'], loss_mask=loss_mask * w['loss_mask'],
                    loss_dice=loss_dice * w['loss_dice'])
