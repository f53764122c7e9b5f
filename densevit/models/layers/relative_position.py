"""Relative position bias: a learned scalar per head for each 2D offset between patches.

Instead of adding a code to the tokens, attention logits get a bias that
depends only on where the key patch lies relative to the query patch
(Shaw et al. 2018; in 2D as in Swin and BEiT; the ViT paper's App. D.4
"relative" variant):

    attn = softmax(Q K^T / sqrt(d) + B[dy, dx]) V,   dy = r_q - r_k,  dx = c_q - c_k

For an h x w grid the offsets span (2h-1) x (2w-1) values, so the table holds
(2h-1)(2w-1) rows, one bias per head each. The full [heads, N, N] bias is
gathered once per forward and handed to ``scaled_dot_product_attention`` as
its float ``attn_mask``. Its memory is heads * N^2 floats: fine for windows
or ViT grids of a few hundred patches, large for global attention over
thousands (e.g. 50x76 patches, 12 heads: 0.7 GB in float32).

The table layout, ``[(dy + h-1) * (2w-1) + (dx + w-1), head]``, is Swin's
``relative_position_bias_table``, so its checkpoints load unchanged.
"""
import math

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from torch import nn

from .pos_embed import same_grid


def relative_position_index(hw, device=None):
    """[h*w, h*w] long: row of the bias table for each (query, key) pair, row-major tokens."""
    h, w = hw
    # broadcast, not repeat / repeat_interleave: those lose their symbolic sizes in ONNX
    rows = torch.arange(h, device=device)[:, None].expand(h, w).reshape(-1)  # [N] row of each token
    cols = torch.arange(w, device=device)[None, :].expand(h, w).reshape(-1)
    dy = rows[:, None] - rows[None, :] + (h - 1)  # query minus key, shifted to >= 0
    dx = cols[:, None] - cols[None, :] + (w - 1)
    return dy * (2 * w - 1) + dx


def resize_relative_position_table(table, src_hw, dst_hw, mode='bicubic'):
    """Resize a bias table made for grid ``src_hw`` to grid ``dst_hw``.

    Args:
        table: [(2h0-1)(2w0-1), heads].
        src_hw, dst_hw (tuple[int, int]): (h0, w0) and (h1, w1).
        mode (str): ``F.interpolate`` mode, applied per head to the
            (2h0-1) x (2w0-1) offset image.

    Returns:
        [(2h1-1)(2w1-1), heads]; ``table`` itself when the grids match. The
        zero offset stays at the centre (align_corners=False maps centre to centre).
    """
    src_hw, dst_hw = tuple(src_hw), tuple(dst_hw)
    if same_grid(src_hw, dst_hw):  # (symbolic sizes under torch.export: resized)
        return table
    (h0, w0), (h1, w1) = src_hw, dst_hw
    rows, heads = table.shape
    if rows != (2 * h0 - 1) * (2 * w0 - 1):
        raise ValueError(f'relative position table has {rows} rows, expected '
                         f'(2*{h0}-1)*(2*{w0}-1) = {(2 * h0 - 1) * (2 * w0 - 1)}')
    img = table.t().reshape(1, heads, 2 * h0 - 1, 2 * w0 - 1).float()
    kwargs = {} if mode == 'nearest' else dict(align_corners=False)
    img = F.interpolate(img, size=(2 * h1 - 1, 2 * w1 - 1), mode=mode, **kwargs)
    return img.reshape(heads, -1).t().to(table.dtype)


def infer_square_grid(rows, what):
    """Grid side s of a table with (2s-1)^2 rows, or a clear error."""
    side = math.isqrt(rows)
    if side * side != rows or side % 2 == 0:
        raise ValueError(f'{what}: cannot resize a relative position table of {rows} rows: '
                         f'the grid it was made for is unknown (not (2s-1)^2 for a square '
                         f's x s grid). Resize it with resize_relative_position_table(table, '
                         f'src_hw=(h, w), ...) before loading.')
    return (side + 1) // 2


class RelativePositionBias(nn.Module):
    """Learned relative position bias of one attention layer (config type ``relative``).

    Extra (class) tokens have no grid position. With ``extra_token_bias='learned'``
    they get three learned scalars per head, shared by all extra tokens:
    extra->patch, patch->extra and extra->extra (as BEiT does for its class
    token); with ``'zero'`` their rows and columns of the bias are 0.

    Args:
        num_patches_hw (tuple[int, int]): grid (h0, w0) the table is made for
            (a ViT's patch grid, or a Swin window).
        num_heads (int): attention heads.
        num_extra_tokens (int): E, extra tokens before the grid tokens.
        extra_token_bias (str): 'learned' or 'zero'.
        interpolate_mode (str): how the table is resized for another grid.

    Parameters:
        relative_position_bias_table: [(2h0-1)(2w0-1), heads].
        extra_token_table: [3, heads] (only when 'learned' and E > 0).

    Shapes:
        ``bias(hw)`` / ``forward(hw)`` -> [1, heads, E + h*w, E + h*w], to add to
        (or pass as ``attn_mask`` for) logits of shape [B, heads, N, N].
    """

    kind = 'relative'

    def __init__(self, num_patches_hw, num_heads, num_extra_tokens=0,
                 extra_token_bias='learned', interpolate_mode='bicubic'):
        super().__init__()
        if extra_token_bias not in ('learned', 'zero'):
            raise ValueError(f"extra_token_bias must be 'learned' or 'zero', "
                             f"got {extra_token_bias!r}")
        self.num_patches_hw = tuple(num_patches_hw)
        self.num_heads = num_heads
        self.num_extra_tokens = num_extra_tokens
        self.interpolate_mode = interpolate_mode
        h0, w0 = self.num_patches_hw
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * h0 - 1) * (2 * w0 - 1), num_heads))
        self.extra_token_table = (nn.Parameter(torch.zeros(3, num_heads))
                                  if extra_token_bias == 'learned' and num_extra_tokens else None)
        self._index_cache = None  # (hw, device, index): grids rarely change between calls

    def init_weights(self):
        for p in self.parameters():
            nn.init.trunc_normal_(p, std=.02)

    def _index(self, hw, device):
        """Flat [(E + h*w)^2] column of the extended table (see :meth:`bias`) per
        (query, key) pair, row-major; cached for the last grid (not while exporting:
        the grid is symbolic then, and the index a part of the graph)."""
        if torch.compiler.is_exporting():
            return self._build_index(hw, device)
        cache = self._index_cache
        if cache is None or cache[0] != hw or cache[1] != device:
            # A normal tensor even under inference_mode: index_select saves it for backward.
            with torch.inference_mode(False):
                index = self._build_index(hw, device)
            cache = self._index_cache = (hw, device, index)
        return cache[2]

    def _build_index(self, hw, device):
        grid = relative_position_index(hw, device)
        E, R = self.num_extra_tokens, (2 * hw[0] - 1) * (2 * hw[1] - 1)
        if not E:  # (a Swin window; fewer ops in an exported graph)
            return grid.flatten()
        index = torch.empty(E + grid.shape[0], E + grid.shape[0], dtype=torch.long,
                            device=device)
        index[E:, E:] = grid
        index[:E, E:] = R  # extra -> patch
        index[E:, :E] = R + 1  # patch -> extra
        index[:E, :E] = R + 2  # extra -> extra
        return index.flatten()

    def bias(self, hw):
        """[1, heads, E + h*w, E + h*w] bias for grid ``hw`` = (h, w)."""
        hw = tuple(hw)
        table = resize_relative_position_table(self.relative_position_bias_table,
                                               self.num_patches_hw, hw, self.interpolate_mode)
        # [heads, rows + 3]: the grid offsets, then extra->patch, patch->extra and
        # extra->extra (zeros for 'zero'). One gather along its contiguous rows then
        # writes the whole bias in its final layout: no transpose, no concatenation.
        table = table.t()
        if self.num_extra_tokens:
            extra = self.extra_token_table
            extra = table.new_zeros(table.shape[0], 3) if extra is None else extra.t()
            table = torch.cat([table, extra], dim=1)
        N = self.num_extra_tokens + hw[0] * hw[1]
        index = self._index(hw, table.device)
        return table.contiguous().index_select(1, index).view(1, self.num_heads, N, N)

    def forward(self, hw):
        return self.bias(hw)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A table made for another (square) grid or window is resized on load.
        key = prefix + 'relative_position_bias_table'
        table = state_dict.get(key)
        own = self.relative_position_bias_table
        if table is not None and table.dim() == 2 and table.shape != own.shape \
                and table.shape[1] == own.shape[1]:
            side = infer_square_grid(table.shape[0], key)
            h, w = self.num_patches_hw
            print_log(f'Resizing {key} from grid {side}x{side} to {h}x{w} on load',
                      logger='current')
            state_dict[key] = resize_relative_position_table(
                table, (side, side), self.num_patches_hw, self.interpolate_mode)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self):
        return (f'grid={self.num_patches_hw}, num_heads={self.num_heads}, '
                f'num_extra_tokens={self.num_extra_tokens}')
