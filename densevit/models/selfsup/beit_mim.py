"""BEiT's masked image modelling (Bao et al. 2022, "BEiT: BERT Pre-Training of Image
Transformers"): blockwise masks, a learned mask token, the masked patches' visual tokens
predicted from the encoder's output."""
import random

import torch
from torch import nn

from densevit.registry import MODELS

from .base import MaskedTokenClassifier
from .masking import block_mask, num_kept


@MODELS.register_module()
class BEiT(MaskedTokenClassifier):
    """BEiT pre-training of a densevit :class:`VisionTransformer` (the paper's Sec. 2).

    - **Masks**: per image about ``mask_ratio`` of the patches (BEiT: 75 of 196, 40%) in
      blocks, BEiT's algorithm (:func:`~.masking.block_mask`: rectangles of at least
      ``min_num_patches`` patches, aspect ratio in [``min_aspect``, 1 / ``min_aspect``],
      until ``N - round(N * (1 - mask_ratio))`` are masked, never more).
    - **Encoder**: the masked patches' embeddings are replaced by a learned ``mask_token``
      before any position code; the whole sequence goes through the ViT (BEiT's: a
      relative position bias shared by the layers, ``pos_embed=dict(type='relative',
      placement='every_layer_shared')``, and LayerScale, ``layer_scale_init_value``).
    - **Targets**: the visual token of every patch of the un-masked image from ``tokenizer``
      (a :class:`~.tokenizer.KMeansTokenizer`: the nearest k-means codeword to the patch's
      feature in a frozen teacher ViT; BEiT's is DALL-E's discrete VAE).
    - **Loss** (:class:`~.heads.BEiTHead`): a Linear from each masked patch's output token to
      the ``num_tokens`` ids, cross-entropy over the masked patches only.

    Checkpoint keys: ``backbone.*`` (exactly a ViT's state dict), ``mask_token`` [1, 1, D],
    ``head.fc.*``, and the frozen tokenizer (``tokenizer.teacher.*``, ``tokenizer.codebook``),
    which a detector or segmentor loading ``backbone.*`` drops.

    Args:
        backbone (dict): a ``VisionTransformer`` config; every image must have its
            ``img_size`` (the masks are made for that grid).
        head (dict): a ``BEiTHead`` config (``in_channels`` filled in).
        tokenizer (dict): a ``KMeansTokenizer`` config (``num_tokens`` filled in from the
            head: the tokenizer file's codebook must have that size).
        mask_ratio (float): the share of each image's patches to mask, in (0, 1).
        min_num_patches (int): the smallest block (BEiT: 16).
        max_num_patches (int, optional): the largest block (BEiT: none).
        min_aspect (float): blocks' aspect ratios lie in [min_aspect, 1 / min_aspect].
        val_seed (int): seed of the evaluation masks (see :class:`MaskedImageModel`).

    Modes:
        'loss': ``dict(loss_mim=..., acc_mim=...)`` (accuracy on the masked patches).
        'tensor': ``dict(logits=[B, N, K], target=[B, N], mask=[B, N] bool)``.
        'predict': each DataSample gets ``pretrain_loss``, ``pretrain_acc`` (over its masked
            patches) and ``patch_mask`` [h, w] bool.

    Raises ValueError at build time (beside :class:`MaskedImageModel`'s): a grid on which no
    block of ``min_num_patches`` fits (BEiT's blocks are smaller than the grid on both sides).
    """

    objective = 'mim'

    def __init__(self, backbone, head, tokenizer, mask_ratio=0.4, min_num_patches=16,
                 max_num_patches=None, min_aspect=0.3, val_seed=0, data_preprocessor=None,
                 init_cfg=None):
        super().__init__(backbone, mask_ratio, val_seed, data_preprocessor, init_cfg)
        h, w = self.backbone.grid_hw
        if (h - 1) * (w - 1) < min_num_patches:
            raise ValueError(f'BEiT: no block of min_num_patches={min_num_patches} patches fits '
                             f'the {h}x{w} patch grid (a block is smaller than the grid on both '
                             f'sides: at most {h - 1}x{w - 1}); lower min_num_patches')
        self.num_masking_patches = h * w - num_kept(h * w, mask_ratio)
        self.block_cfg = dict(min_num_patches=min_num_patches, max_num_patches=max_num_patches,
                              min_aspect=min_aspect)
        D = self.backbone.embed_dims
        self.mask_token = nn.Parameter(torch.zeros(1, 1, D))
        self.head = MODELS.build(dict(dict(head), in_channels=D))
        self.tokenizer = MODELS.build(dict(dict(tokenizer), num_tokens=self.head.num_tokens))

    def init_weights(self):
        super().init_weights()
        nn.init.trunc_normal_(self.mask_token, std=.02)

    def draw(self, batch, num_patches, generator):
        h, w = self.backbone.grid_hw
        if num_patches != h * w:
            raise ValueError(f'BEiT: an input of {num_patches} patches; the blockwise masks are '
                             f'made for the backbone grid of {h}x{w} (img_size '
                             f'{h * self.pixel_patch}x{w * self.pixel_patch}): resize or crop '
                             f'the images to it')
        seeds = torch.randint(2 ** 62, (batch,), generator=generator).tolist()
        masks = [block_mask((h, w), self.num_masking_patches, random.Random(s), **self.block_cfg)
                 for s in seeds]
        return dict(mask=torch.stack(masks).flatten(1))

    def run(self, inputs, tokens, hw, draws):
        mask = draws['mask']
        tokens = torch.where(mask[..., None], self.mask_token.to(tokens.dtype), tokens)
        x = self.backbone.encode(tokens, hw)[:, self.backbone.num_extra_tokens:]
        return dict(logits=self.head(x), target=self.tokenizer(inputs), mask=mask)
