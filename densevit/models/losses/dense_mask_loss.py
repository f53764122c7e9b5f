"""DETR's mask losses (Carion et al. 2020, Sec. 4.4): the sigmoid focal loss and the dice loss
of each matched query's mask against its target, over every pixel of the target's resolution
(no point sampling: compare :mod:`densevit.models.losses.point_loss`, Mask2Former's)."""
import torch.nn.functional as F

from .point_loss import dice_score_loss
from .set_criterion import sigmoid_focal_loss


def upsampled_masks(mask_logits, size, crop):
    """Mask logits [M, h, w] of the padded input's stride -> [M, crop_h, crop_w]: resized
    bilinearly (``align_corners=False``) to the padded input ``size`` (H, W), then its top-left
    ``crop`` kept (the batch's largest image: where the targets are)."""
    up = F.interpolate(mask_logits[:, None], size=tuple(size), mode='bilinear',
                       align_corners=False)[:, 0]
    return up[:, :crop[0], :crop[1]]


def dense_mask_losses(mask_logits, target_masks, num_masks, alpha=0.25, gamma=2.0):
    """Focal and dice losses of matched pairs at full resolution.

    Args:
        mask_logits: [M, H, W] the matched predictions, at the targets' size.
        target_masks: [M, H, W] their targets (0 / 1; zeros on batch padding).
        num_masks (float): the normaliser (targets in the batch, averaged over processes).
        alpha, gamma (float): the focal loss' α and γ (0.25, 2).

    Returns:
        (loss_mask, loss_dice): the per-mask mean focal loss over the pixels and the dice
        loss (:func:`~densevit.models.losses.point_loss.dice_score_loss`), each summed over
        the pairs and divided by ``num_masks``.
    """
    if mask_logits.shape[0] == 0:  # nothing matched: zero, still part of the graph
        zero = mask_logits.sum() * 0
        return zero, zero
    logits = mask_logits.flatten(1)
    targets = target_masks.flatten(1).to(logits.dtype)
    loss_mask = sigmoid_focal_loss(logits, targets, alpha, gamma).mean(1).sum() / num_masks
    loss_dice = dice_score_loss(logits.sigmoid(), targets).sum() / num_masks
    return loss_mask, loss_dice
