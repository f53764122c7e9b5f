"""The targets and losses of masked pre-training: MAE's pixels, the ViT paper's mean colours,
BEiT's visual tokens."""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from densevit.registry import MODELS

from .masking import patchify, unpatchify


@MODELS.register_module()
class MAEPretrainHead(BaseModule):
    """MAE's target and loss (He et al. 2022, Sec. 3): mean squared error of the predicted
    pixels on the masked patches only.

    The target is each patch's vector of pixels of the (normalised) input image, in
    :func:`~.masking.patchify` layout; with ``norm_pix`` each patch vector is normalised
    by its own mean and variance, ``(t - mean) / sqrt(var + eps)`` (MAE's "normalized
    pixels", the variance unbiased as in MAE's code), which the paper finds gives
    better representations. No parameters.

    Args:
        patch_size (int): pixel size P of a patch (set by :class:`MAE`).
        norm_pix (bool): per-patch normalised targets.
        eps (float): added to the variance (MAE: 1e-6).
        img_channels (int): C.
        masked_only (bool): the training loss on the masked patches only (MAE); False:
            on every patch, the visible ones included (the paper's ablation, Sec. 4.1:
            the encoder's visible tokens must then also carry their own pixels).
            :meth:`per_image_loss`, the validation score, is on the masked patches
            either way.
    """

    def __init__(self, patch_size, norm_pix=True, eps=1e-6, img_channels=3, masked_only=True,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.patch_size = patch_size
        self.norm_pix = norm_pix
        self.masked_only = masked_only
        self.eps = eps
        self.img_channels = img_channels

    def _stats(self, patches):
        return patches.mean(-1, keepdim=True), patches.var(-1, keepdim=True)

    def target(self, img):
        """img [B, C, H, W] -> target patch vectors [B, N, P*P*C]."""
        t = patchify(img, self.patch_size)
        if self.norm_pix:
            mean, var = self._stats(t)
            t = (t - mean) / (var + self.eps) ** .5
        return t

    def per_image_loss(self, pred, img, mask):
        """pred [B, N, P*P*C], img [B, C, H, W], mask [B, N] bool -> [B]: each image's mean
        over its masked patches of the per-patch mean squared error."""
        err = (pred - self.target(img)).pow(2).mean(-1) * mask
        return err.sum(1) / mask.sum(1)

    def loss(self, pred, img, mask):
        """The batch's mean over all masked patches (``masked_only``; else over every patch)
        of the per-patch mean squared error."""
        err = (pred - self.target(img)).pow(2).mean(-1)
        if not self.masked_only:
            return err.mean()
        return (err * mask).sum() / mask.sum()

    def reconstruct(self, pred, img, mask, paste=True, true_stats=False):
        """Pixels from the prediction -> [B, C, H, W] in ``img``'s (normalised) space.

        Args:
            pred: [B, N, P*P*C] the decoder's output; img: [B, C, H, W]; mask: [B, N].
            paste (bool): visible patches from ``img``, only the masked ones from ``pred``;
                False: the model's output on every patch (the MAE paper's Figure 2, where
                the visible patches, which no loss trains, look worse).
            true_stats (bool): with ``norm_pix`` a prediction is a normalised patch vector
                and needs a mean and a variance to be shown. False (default): the mean,
                over the image's visible patches, of their means and variances, which the
                model saw; True: each patch's own, as MMPretrain shows it, which puts the
                hidden patch's true colour and contrast into the picture (even an untrained
                model then seems to recover the shapes).
        """
        patches = patchify(img, self.patch_size)
        if self.norm_pix:
            mean, var = self._stats(patches)  # [B, N, 1]
            if not true_stats:
                visible = (~mask)[..., None]
                count = visible.sum(1, keepdim=True)
                mean = ((mean * visible).sum(1, keepdim=True) / count).expand_as(mean)
                var = ((var * visible).sum(1, keepdim=True) / count).expand_as(var)
            pred = pred * (var + self.eps) ** .5 + mean
        out = pred.to(patches.dtype)
        if paste:
            out = torch.where(mask[..., None], out, patches)
        hw = (img.shape[-2] // self.patch_size, img.shape[-1] // self.patch_size)
        return unpatchify(out, self.patch_size, hw, self.img_channels)


def mean_colour_classes(pixels, patch_size, bits=3):
    """The ViT paper's masked-patch-prediction target (App. B.1.2): each patch's mean colour,
    every channel quantised to ``bits`` bits -> one class of ``2 ** (3 * bits)``.

    Args:
        pixels: [B, 3, H, W] integer-valued 0..255 (the un-normalised image; floats are
            rounded to the nearest integer first), channels in the model's order (RGB when
            the data preprocessor converts BGR to RGB).
        patch_size (int): P.
        bits (int): bits per channel (3: 8 levels of 32 values, 512 classes).

    Returns:
        [B, N] long: ``level(c0) * 2^(2 bits) + level(c1) * 2^bits + level(c2)``, with
        ``level(c) = floor(mean of c over the patch / (256 / 2^bits))``, computed exactly
        in integers as ``sum // (P*P * 256 / 2^bits)``.
    """
    sums = patchify(pixels.round().long(), patch_size)  # [B, N, P*P*3]
    sums = sums.reshape(*sums.shape[:2], -1, 3).sum(2)  # [B, N, 3]
    levels = sums // (patch_size * patch_size * (256 >> bits))
    return (levels[..., 0] << (2 * bits)) + (levels[..., 1] << bits) + levels[..., 2]


class PatchClassifierHead(BaseModule):
    """One Linear layer from each patch token to ``num_classes`` logits, cross-entropy on the
    masked (corrupted) patches only: what :class:`MPPHead` and :class:`BEiTHead` share."""

    def __init__(self, in_channels, num_classes, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x):
        """Patch tokens [B, N, D] -> logits [B, N, num_classes]."""
        return self.fc(x)

    def loss(self, logits, target, mask):
        """Mean cross-entropy over the masked patches (``mask`` True) of the batch."""
        return F.cross_entropy(logits[mask], target[mask])

    def per_image(self, logits, target, mask):
        """Each image's mean cross-entropy and accuracy over its masked patches: ([B], [B])."""
        ce = F.cross_entropy(logits.transpose(1, 2), target, reduction='none') * mask
        hit = (logits.argmax(-1) == target) * mask
        count = mask.sum(1)
        return ce.sum(1) / count, hit.sum(1) / count


@MODELS.register_module()
class MPPHead(PatchClassifierHead):
    """Masked patch prediction's head (ViT paper, App. B.1.2): a Linear layer from each patch
    token to the ``2 ** (3 * bits)`` mean-colour classes, cross-entropy on the corrupted
    patches only.

    Args:
        in_channels (int): the encoder's width (set by :class:`MaskedPatchPrediction`).
        patch_size (int): pixel size P of a patch (set by the model).
        bits (int): bits per colour channel of the target (the paper: 3, 512 classes).
    """

    def __init__(self, in_channels, patch_size, bits=3, init_cfg=None):
        super().__init__(in_channels, 2 ** (3 * bits), init_cfg=init_cfg)
        self.patch_size = patch_size
        self.bits = bits

    def target(self, pixels):
        return mean_colour_classes(pixels, self.patch_size, self.bits)


@MODELS.register_module()
class BEiTHead(PatchClassifierHead):
    """BEiT's masked-image-modelling head (Bao et al. 2022, Sec. 2.3): a Linear layer from
    each patch token to the ``num_tokens`` visual tokens of the tokenizer, cross-entropy on
    the masked patches only (``head.fc.*``; BEiT's ``lm_head``).

    Args:
        in_channels (int): the encoder's width (set by :class:`BEiT`).
        num_tokens (int): the vocabulary: the tokenizer's codebook size (checked against
            the tokenizer file when it is read).
    """

    def __init__(self, in_channels, num_tokens, init_cfg=None):
        super().__init__(in_channels, num_tokens, init_cfg=init_cfg)
        self.num_tokens = num_tokens
