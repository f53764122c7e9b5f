"""Learned 1D absolute position embedding, and resizing of absolute tables.

A learned table is made for one patch grid (e.g. 14x14 for 224 / 16). Dense
prediction runs at other sizes (800x1216 -> 50x76), so the grid part of the
table is resized by 2D interpolation at every forward, as in the ViT paper's
fine-tuning at higher resolution (Sec. 3.2).

The other members of the position-embedding family live beside it:
``pos_embed_2d.py`` (learned x/y halves, fixed sine-cosine), ``relative_position.py``
(relative bias on attention logits); ``pos_embed_builder.py`` builds any of them.
All absolute members share one interface: ``table(hw) -> [1, E + h*w, D]`` and
``forward(tokens, hw) -> tokens + table(hw)``; ``kind = 'absolute'``.
"""
import math

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from torch import nn


def same_grid(src_hw, dst_hw):
    """Whether two grids are equal sizes known now. Symbolic sizes (a dynamic dimension
    under ``torch.export``) count as different: comparing them would fix the exported
    graph to one input size, so the (identity) resize stays in the graph instead."""
    src_hw, dst_hw = tuple(src_hw), tuple(dst_hw)
    if any(isinstance(v, torch.SymInt) for v in src_hw + dst_hw):
        return False
    return src_hw == dst_hw


def interpolate_kwargs(mode):
    """``F.interpolate`` keywords of a table resize mode: 'nearest', 'bilinear', 'bicubic',
    or 'bicubic_antialias' (``antialias=True``: the separable kernel with PIL's cubic
    coefficient -0.5 instead of -0.75, so upsampling differs too; Hugging Face's
    ``Dinov2WithRegistersModel`` resizes its table so)."""
    if mode == 'nearest':
        return dict(mode=mode)
    if mode == 'bicubic_antialias':
        return dict(mode='bicubic', align_corners=False, antialias=True)
    return dict(mode=mode, align_corners=False)


def resize_pos_embed(pos_embed, src_hw, dst_hw, num_extra_tokens, mode='bicubic'):
    """Resize the grid part of a position table to a new patch grid.

    Args:
        pos_embed: [1, E + h0*w0, D], the E extra-token (e.g. cls) rows first,
            then the grid in row-major order.
        src_hw (tuple[int, int]): (h0, w0) the table was made for.
        dst_hw (tuple[int, int]): (h1, w1) wanted.
        num_extra_tokens (int): E, rows kept unchanged.
        mode (str): ``F.interpolate`` mode ('bicubic', 'bilinear', 'nearest'), or
            'bicubic_antialias' (:func:`interpolate_kwargs`).

    Returns:
        [1, E + h1*w1, D]; ``pos_embed`` itself when the sizes match.
    """
    src_hw, dst_hw = tuple(src_hw), tuple(dst_hw)
    if same_grid(src_hw, dst_hw):
        return pos_embed
    h0, w0 = src_hw
    _, n, d = pos_embed.shape
    if n != num_extra_tokens + h0 * w0:
        raise ValueError(f'pos_embed has {n} rows, expected {num_extra_tokens} extra + '
                         f'{h0}x{w0} grid')
    extra, grid = pos_embed[:, :num_extra_tokens], pos_embed[:, num_extra_tokens:]
    grid = grid.reshape(1, h0, w0, d).permute(0, 3, 1, 2)  # [1, D, h0, w0]
    # Interpolate in float32: bicubic is not implemented for every half type.
    grid = F.interpolate(grid.float(), size=dst_hw, **interpolate_kwargs(mode))
    grid = grid.to(pos_embed.dtype)
    grid = grid.flatten(2).transpose(1, 2)  # [1, h1*w1, D]
    return torch.cat([extra, grid], dim=1)


def square_grid_side(num_rows, what):
    """Side s of a square s x s grid with ``num_rows`` cells, or a clear error.

    A flat table does not record its grid; only a square one can be inferred.
    """
    side = math.isqrt(max(num_rows, 0))
    if side * side != num_rows:
        raise ValueError(f'{what}: cannot resize a table of {num_rows} grid rows: the grid it was '
                         f'made for is unknown (not a square number of patches). Resize it with '
                         f'resize_pos_embed(table, src_hw=(h, w), ...) before loading.')
    return side


class LearnedPositionEmbedding(nn.Module):
    """Learned absolute 1D position embedding (config type ``learned_1d``).

    One row per token (extra tokens first, then the patch grid row by row),
    the ViT default. The table is kept for ``num_patches_hw`` and resized to
    the input's grid on every call, so nothing depends on the input size.
    A checkpoint table made for another square grid is resized on load; one
    made for a non-square grid cannot be (its grid is unknown): ValueError.

    Args:
        num_patches_hw (tuple[int, int]): patch grid (h0, w0) of the table.
        embed_dims (int): D.
        num_extra_tokens (int): E, e.g. 1 for a class token.
        interpolate_mode (str): mode used to resize the grid part.

    Parameters:
        weight: [1, E + h0*w0, D] (timm's ``pos_embed`` layout).
    """

    kind = 'absolute'

    def __init__(self, num_patches_hw, embed_dims, num_extra_tokens=1,
                 interpolate_mode='bicubic'):
        super().__init__()
        self.num_patches_hw = tuple(num_patches_hw)
        self.num_extra_tokens = num_extra_tokens
        self.interpolate_mode = interpolate_mode
        h0, w0 = self.num_patches_hw
        self.weight = nn.Parameter(torch.zeros(1, num_extra_tokens + h0 * w0, embed_dims))

    def init_weights(self):
        nn.init.trunc_normal_(self.weight, std=.02)

    def table(self, hw):
        """The table resized to grid ``hw``: [1, E + h*w, D]."""
        return resize_pos_embed(self.weight, self.num_patches_hw, hw,
                                self.num_extra_tokens, self.interpolate_mode)

    def forward(self, tokens, hw):
        """tokens: [B, E + h*w, D], hw = (h, w) -> tokens + table, same shape."""
        return tokens + self.table(hw)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A square table made for another grid (e.g. a 384-pixel checkpoint) is
        # resized on load, so pretrained weights are not dropped over a shape
        # mismatch.
        key = prefix + 'weight'
        table = state_dict.get(key)
        if table is not None and table.dim() == 3 and table.shape != self.weight.shape:
            if table.shape[2] == self.weight.shape[2]:
                rows, extra = table.shape[1], self.num_extra_tokens
                side = square_grid_side(rows - extra, f'{key} ({rows} rows in the checkpoint, '
                                                      f'{extra} for extra tokens here)')
                print_log(f'Resizing {key} from {side}x{side} to '
                          f'{self.num_patches_hw[0]}x{self.num_patches_hw[1]} on load (a ViT '
                          f'built with pos_grid=({side}, {side}) keeps the table as trained)',
                          logger='current')
                state_dict[key] = resize_pos_embed(table, (side, side), self.num_patches_hw,
                                                   self.num_extra_tokens, self.interpolate_mode)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
