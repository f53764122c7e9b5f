"""Quality focal loss (Li et al. 2020, "Generalized Focal Loss", §3.1, Eq. 5).

A sigmoid classifier's target for the matched class of a positive is the quality of its
box (the IoU of the predicted box with its target) instead of 1; every other logit's
target is 0. Each element's binary cross-entropy is scaled by ``|target − σ(logit)|^β``,
which for a 0 target is the focal loss' ``σ^γ`` without its α. Co-DINO's classification
loss (its DETR head's and its customized positive queries').
"""
import torch.nn.functional as F


def quality_focal_loss(logits, targets, beta=2.0):
    """Quality focal loss per element: logits, targets [...] (targets in [0, 1]: the IoU at
    a positive's class, 0 elsewhere) -> [...]."""
    scale = (targets - logits.sigmoid()).abs().pow(beta)
    return F.binary_cross_entropy_with_logits(logits, targets, reduction='none') * scale
