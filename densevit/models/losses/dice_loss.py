"""Soft Dice loss over softmax probabilities, for semantic segmentation with an ignore label.

Cross-entropy weighs every pixel equally, so on data where one class (background)
covers most pixels a model can sit near "everything is background" for a long time.
Dice scores each class by its overlap, whatever its area, which pulls small classes
out of that plateau; it is used beside cross-entropy (a list in ``loss_decode``).
"""
import torch

from densevit.registry import MODELS

from .cross_entropy_loss import check_labels


@MODELS.register_module()
class DiceLoss(torch.nn.Module):
    """``1 - mean_{b,k} dice_{b,k}`` over images b and classes k.

    With p = softmax(logits), t = one-hot(label), v = 1 on non-ignored pixels::

        dice_{b,k} = (2 * sum_px p t v + eps) / (sum_px p^e v + sum_px t v + eps)

    where e = 2 (V-Net's squared denominator) or e = 1 with ``naive_dice=True``.
    A class absent from an image scores 1 only if the model predicts none of it
    there, so absent classes are also learned. Ignored pixels get no gradient;
    an image whose labels are all ignored gives ``eps / eps`` = loss 0 for it.

    Args:
        loss_weight (float): multiplies the loss.
        ignore_index (int): label to skip.
        eps (float): smoothing in numerator and denominator.
        naive_dice (bool): plain sums (e = 1) in the denominator.
        loss_name (str): key of this loss in the head's loss dict.

    Shapes:
        cls_score: [B, K, H, W] logits; label: [B, H, W] long -> scalar.
    """

    def __init__(self, loss_weight=1.0, ignore_index=255, eps=1e-3, naive_dice=False,
                 loss_name='loss_dice'):
        super().__init__()
        self.loss_weight = loss_weight
        self.ignore_index = ignore_index
        self.eps = eps
        self.naive_dice = naive_dice
        self._loss_name = loss_name

    @property
    def loss_name(self):
        return self._loss_name

    def forward(self, cls_score, label, ignore_index=None):
        """cls_score [B, K, H, W], label [B, H, W] -> scalar loss."""
        ignore_index = self.ignore_index if ignore_index is None else ignore_index
        num_classes = cls_score.shape[1]
        check_labels('DiceLoss', label, num_classes, ignore_index)
        valid = label != ignore_index  # [B, H, W]
        v = valid.unsqueeze(1)  # [B, 1, H, W]
        prob = cls_score.softmax(dim=1) * v  # [B, K, H, W]
        one_hot = torch.zeros_like(prob).scatter_(
            1, torch.where(valid, label, 0).unsqueeze(1), 1.0) * v
        inter = (prob * one_hot).flatten(2).sum(-1)  # [B, K]
        p_sum = (prob if self.naive_dice else prob * prob).flatten(2).sum(-1)
        t_sum = one_hot.flatten(2).sum(-1)
        dice = (2 * inter + self.eps) / (p_sum + t_sum + self.eps)
        return self.loss_weight * (1 - dice.mean())
