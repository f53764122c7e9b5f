"""Per-pixel softmax cross-entropy for semantic segmentation, with an ignore label."""
import torch
import torch.nn.functional as F
from torch import nn

from densevit.registry import MODELS


def check_labels(loss_name, label, num_classes, ignore_index):
    """Raise if a label is outside ``[0, num_classes)`` and is not ``ignore_index``.

    An out-of-range label makes the loss crash deep inside (a device-side assert on
    GPU) or silently mis-index; the usual culprit is the dataset's
    ``reduce_zero_label`` setting, so the message says so and lists the values.
    """
    # one host-device sync (the ``any``) and no boolean compaction of the label map: on a GPU
    # every ``.item()``-like read stalls the queue of kernels
    out_of_range = ((label < 0) | (label >= num_classes)) & (label != ignore_index)
    if out_of_range.any():
        bad = label[out_of_range].unique()
        raise ValueError(
            f'{loss_name}: labels must be in [0, {num_classes}) or {ignore_index} (ignore); '
            f'found {bad[:8].tolist()}. Check num_classes and the dataset\'s '
            f'reduce_zero_label setting.')


@MODELS.register_module()
class CrossEntropyLoss(nn.Module):
    """Softmax cross-entropy over classes, averaged over pixels.

    For pixel p with label y_p != ignore_index:
    ``l_p = -w[y_p] * log softmax(x_p)[y_p]`` (w = ``class_weight``, or 1).
    Ignored pixels contribute 0 and get 0 gradient.

    Reduction (the mmseg convention, so class weights change the relative
    importance of classes without changing the loss scale's normaliser):
        avg_non_ignore=True: ``sum_p l_p / #non-ignored pixels`` (at least 1),
            so an image whose labels are all ignored gives loss 0, not NaN.
        avg_non_ignore=False: ``sum_p l_p / #all pixels`` (ignored pixels
            dilute the mean; mmseg's historical default).
    PyTorch's own ``reduction='mean'`` divides by the sum of the class
    weights instead; without class weights both agree.

    Args:
        loss_weight (float): multiplies the loss (e.g. 0.4 for auxiliary heads).
        ignore_index (int): label to skip (255: padding and "void").
        class_weight (list[float], optional): one weight per class.
        avg_non_ignore (bool): see above.
        loss_name (str): key of this loss in the head's loss dict.
        use_sigmoid (bool): accepted for mmseg config compatibility; only
            False (softmax) is implemented.

    Shapes:
        cls_score: [B, K, H, W] logits; label: [B, H, W] long -> scalar.
    """

    def __init__(self, loss_weight=1.0, ignore_index=255, class_weight=None,
                 avg_non_ignore=True, loss_name='loss_ce', use_sigmoid=False):
        super().__init__()
        if use_sigmoid:
            raise NotImplementedError('CrossEntropyLoss: use_sigmoid=True (binary / '
                                      'multi-label) is not implemented; use softmax.')
        self.loss_weight = loss_weight
        self.ignore_index = ignore_index
        self.avg_non_ignore = avg_non_ignore
        self._loss_name = loss_name
        # A buffer (not a parameter) so it follows .to(device) and is saved,
        # but is never trained.
        weight = None if class_weight is None else torch.as_tensor(class_weight, dtype=torch.float)
        self.register_buffer('class_weight', weight, persistent=False)

    @property
    def loss_name(self):
        return self._loss_name

    def forward(self, cls_score, label, ignore_index=None):
        """cls_score [B, K, H, W], label [B, H, W] -> weighted scalar loss."""
        ignore_index = self.ignore_index if ignore_index is None else ignore_index
        check_labels(self._loss_name, label, cls_score.shape[1], ignore_index)
        weight = None
        if self.class_weight is not None:
            weight = self.class_weight.to(cls_score)
        per_pixel = F.cross_entropy(cls_score, label, weight=weight, reduction='none',
                                    ignore_index=ignore_index)  # [B, H, W], 0 where ignored
        if self.avg_non_ignore:
            denom = (label != ignore_index).sum().clamp(min=1)
        else:
            denom = max(label.numel(), 1)
        return self.loss_weight * per_pixel.sum() / denom
