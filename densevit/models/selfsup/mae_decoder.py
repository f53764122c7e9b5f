"""MAE's lightweight decoder: encoded visible patches + mask tokens -> pixels of every patch."""
import torch
from mmengine.model import BaseModule
from torch import nn

from densevit.models.backbones.init import init_linear_or_norm
from densevit.models.layers.pos_embed_builder import (
    ABSOLUTE_TYPES,
    build_position_embedding,
    parse_position_embedding_cfg,
)
from densevit.models.layers.vit_block import TransformerEncoderLayer
from densevit.registry import MODELS


@MODELS.register_module()
class MAEPretrainDecoder(BaseModule):
    """The decoder of MAE (He et al. 2022, Sec. 3): its own width, blocks and positions.

    The encoder's tokens (extra tokens, then the visible patches) are projected to the
    decoder's width; a shared learned mask token fills every masked place of the full
    grid; the decoder's own position embedding is added to all tokens (the mask tokens'
    only way of knowing where they are); pre-norm Transformer layers, a LayerNorm and a
    Linear predict each patch's P*P*C pixel values. Extra-token outputs are dropped.

    Args:
        in_channels (int): the encoder's width (set by :class:`MAE`).
        patch_size (int): pixel size P of a patch (set by :class:`MAE`).
        num_patches_hw (tuple[int, int]): the grid the position table is made for (set
            by :class:`MAE`; other grids resize or recompute it, as in the ViT).
        num_extra_tokens (int): the encoder's extra (class) tokens (set by :class:`MAE`).
        embed_dims (int): decoder width (MAE: 512).
        num_layers (int): decoder layers (MAE: 8).
        num_heads (int): attention heads (MAE: 16).
        mlp_ratio (float): MLP width / ``embed_dims``.
        img_channels (int): C, image channels predicted per pixel.
        pos_embed (dict | str): an absolute type of
            :mod:`densevit.models.layers.pos_embed_builder` (``sincos_2d``, MAE's fixed
            codes; ``learned_1d``; ``learned_2d``), added once before the first layer.
        layer_norm_eps (float): LayerNorm epsilon.

    Parameters: ``embed`` (Linear), ``mask_token`` [1, 1, embed_dims], ``pos_embed.*``
    (learned types), ``blocks.*``, ``norm``, ``pred`` (Linear to P*P*C).

    Shapes:
        forward(x [B, E + n, in_channels], keep [B, n], hw) -> [B, h*w, P*P*C].
    """

    def __init__(self, in_channels, patch_size, num_patches_hw, num_extra_tokens=0,
                 embed_dims=512, num_layers=8, num_heads=16, mlp_ratio=4., img_channels=3,
                 pos_embed='sincos_2d', layer_norm_eps=1e-6, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        pe_type, placement, _ = parse_position_embedding_cfg(pos_embed)
        if pe_type not in ABSOLUTE_TYPES or placement != 'stem':
            raise ValueError(f'MAEPretrainDecoder: pos_embed must be one of '
                             f'{", ".join(ABSOLUTE_TYPES)} at the stem (the mask tokens learn '
                             f'their place from it), got {pos_embed!r}')
        self.num_extra_tokens = num_extra_tokens
        self.embed = nn.Linear(in_channels, embed_dims)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = build_position_embedding(pos_embed, embed_dims, tuple(num_patches_hw),
                                                  num_extra_tokens=num_extra_tokens)
        self.blocks = nn.ModuleList(
            TransformerEncoderLayer(embed_dims, num_heads, mlp_ratio=mlp_ratio,
                                    norm_eps=layer_norm_eps) for _ in range(num_layers))
        self.norm = nn.LayerNorm(embed_dims, eps=layer_norm_eps)
        self.pred = nn.Linear(embed_dims, patch_size * patch_size * img_channels)

    def init_weights(self):
        """As MAE: Xavier-uniform Linear weights, zero biases, identity LayerNorms, the mask
        token (and learned position tables) ~ N(0, 0.02)."""
        super().init_weights()
        if self.init_cfg is not None:
            return
        for m in self.modules():
            init_linear_or_norm(m, xavier=True)
        nn.init.normal_(self.mask_token, std=.02)
        self.pos_embed.init_weights()

    def forward(self, x, keep, hw):
        """x: the encoder's output [B, E + n, in_channels]; keep: [B, n] grid indices of the
        visible patches; hw: the grid (h, w) -> pixel predictions [B, h*w, P*P*C]."""
        E = self.num_extra_tokens
        x = self.embed(x)
        B, _, D = x.shape
        # the mask token in x's dtype: under autocast the Linear above gave bf16 / fp16
        full = self.mask_token.to(x.dtype).expand(B, hw[0] * hw[1], D)
        full = torch.scatter(full, 1, keep[..., None].expand(-1, -1, D), x[:, E:])
        x = torch.cat([x[:, :E], full], dim=1) + self.pos_embed.table(hw)
        for block in self.blocks:
            x = block(x)
        return self.pred(self.norm(x))[:, E:]
