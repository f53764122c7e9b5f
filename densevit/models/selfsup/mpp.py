"""Masked patch prediction: the ViT paper's self-supervision (Dosovitskiy et al. 2021, Sec. 4.6
and App. B.1.2)."""
import math

import torch
from torch import nn

from densevit.registry import MODELS

from .base import MaskedTokenClassifier
from .masking import noise_masking, num_kept

UNTOUCHED, MASK_TOKEN, OTHER_PATCH, KEPT = 0, 1, 2, 3  # what corruption did to a patch


def corrupt_tokens(tokens, mask, choice, partner, mask_token, replace_probs):
    """Corrupt the patch tokens where ``mask`` is True, BERT-style.

    Args:
        tokens: [B, N, D] patch embeddings (before position embedding).
        mask: [B, N] bool, the patches to corrupt.
        choice: [B, N] uniform in [0, 1): below ``p_mask`` a corrupted patch becomes
            ``mask_token``, below ``p_mask + p_other`` another patch's embedding, else it
            is kept as it is.
        partner: [B, N] uniform in [0, 1): which other patch, uniformly among the
            batch's B*N - 1 other patch embeddings (any image, any place).
        mask_token: [1, 1, D].
        replace_probs (tuple[float, float, float]): (p_mask, p_other, p_keep).

    Returns:
        (tokens [B, N, D], kind [B, N] long: UNTOUCHED / MASK_TOKEN / OTHER_PATCH / KEPT).
    """
    p_mask, p_other, _ = replace_probs
    kind = torch.where(mask, MASK_TOKEN + (choice >= p_mask).long()
                       + (choice >= p_mask + p_other).long(), UNTOUCHED)
    B, N, D = tokens.shape
    own = torch.arange(B * N, device=tokens.device).view(B, N)
    other = (partner * (B * N - 1)).long().clamp(max=B * N - 2)  # 0 .. B*N-2
    other = other + (other >= own).long()  # skip the patch itself
    out = torch.where((kind == MASK_TOKEN)[..., None], mask_token.to(tokens.dtype), tokens)
    out = torch.where((kind == OTHER_PATCH)[..., None], tokens.reshape(B * N, D)[other], out)
    return out, kind


@MODELS.register_module()
class MaskedPatchPrediction(MaskedTokenClassifier):
    """Masked patch prediction (ViT paper, App. B.1.2) on the same ViT code as :class:`MAE`.

    Per image a ``mask_ratio`` of the patches (the paper: 50%) is corrupted: of those,
    ``replace_probs[0]`` (80%) get a learned mask embedding, ``replace_probs[1]`` (10%)
    another patch's embedding, and the rest (10%) stay as they are. The encoder sees
    all tokens (every position-embedding type and placement as usual); a Linear head
    predicts from each corrupted patch's output token the 3-bit mean colour of the
    original patch (512 classes, :func:`~.heads.mean_colour_classes` of the
    un-normalised image), with cross-entropy on the corrupted patches only.

    Checkpoint keys: ``backbone.*`` (exactly a ViT's state dict), ``mask_token`` [1, 1, D]
    (the mask embedding) and ``head.fc.*`` (:class:`MPPHead`).

    Args:
        backbone (dict): a ``VisionTransformer`` config.
        head (dict): an ``MPPHead`` config (``in_channels``, ``patch_size`` filled in).
        mask_ratio (float): fraction of patches corrupted per image, in (0, 1).
        replace_probs (tuple[float, float, float]): (mask embedding, other patch, kept).
        val_seed (int): seed of the evaluation corruption (see :class:`MaskedImageModel`).
        data_preprocessor (dict): the targets are computed from its input with the
            normalisation undone (rounded to integers 0..255).

    Modes:
        'loss': ``dict(loss_mpp=..., acc_mpp=...)`` (accuracy on the corrupted patches).
        'tensor': ``dict(logits=[B, N, 512], target=[B, N], mask=[B, N] bool (True:
            corrupted), kind=[B, N])``.
        'predict': each DataSample gets ``pretrain_loss``, ``pretrain_acc`` (over its
            corrupted patches) and ``patch_mask`` [h, w] bool.
    """

    objective = 'mpp'

    def __init__(self, backbone, head, mask_ratio=0.5, replace_probs=(0.8, 0.1, 0.1),
                 val_seed=0, data_preprocessor=None, init_cfg=None):
        super().__init__(backbone, mask_ratio, val_seed, data_preprocessor, init_cfg)
        probs = tuple(float(p) for p in replace_probs)
        if len(probs) != 3 or min(probs) < 0 or not math.isclose(sum(probs), 1.0):
            raise ValueError(f'replace_probs must be three non-negative fractions (mask '
                             f'embedding, other patch, kept) summing to 1, got {replace_probs!r}')
        self.replace_probs = probs
        D = self.backbone.embed_dims
        self.mask_token = nn.Parameter(torch.zeros(1, 1, D))
        self.head = MODELS.build(dict(dict(head), in_channels=D, patch_size=self.pixel_patch))

    def init_weights(self):
        super().init_weights()
        nn.init.trunc_normal_(self.mask_token, std=.02)

    def draw(self, batch, num_patches, generator):
        return {k: torch.rand(batch, num_patches, generator=generator)
                for k in ('noise', 'choice', 'partner')}

    def run(self, inputs, tokens, hw, draws):
        _, mask = noise_masking(draws['noise'], num_kept(hw[0] * hw[1], self.mask_ratio))
        tokens, kind = corrupt_tokens(tokens, mask, draws['choice'], draws['partner'],
                                      self.mask_token, self.replace_probs)
        x = self.backbone.encode(tokens, hw)[:, self.backbone.num_extra_tokens:]
        return dict(logits=self.head(x), target=self.head.target(self.raw_pixels(inputs)),
                    mask=mask, kind=kind)
