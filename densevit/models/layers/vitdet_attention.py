"""Windowed attention and decomposed relative positions of a plain ViT (ViTDet, Li et al.
2022; Segment Anything's image encoder, Kirillov et al. 2023).

ViTDet keeps the ViT's blocks as they are and changes where they look: most blocks attend
inside non-overlapping M x M windows of the patch grid, a few (e.g. one in every quarter of
the depth) attend globally, and the windows let information cross only there. A grid that
is not a multiple of M is zero-padded at the bottom / right first (after the block's first
norm, so the padded tokens are zero vectors; their keys and values take part in attention,
unmasked, as in the reference) and cropped back afterwards: the block's output grid is its
input grid.

Decomposed relative position (MViTv2, Li et al. 2022, Sec. 3.1): instead of one learned
bias per 2-D offset, two tables of head-width vectors, one per axis, ``rel_pos_h``
[2h-1, d] and ``rel_pos_w`` [2w-1, d], indexed by the row and column offsets. The logit of
query i = (yi, xi) and key j = (yj, xj) gains

    q_i . rel_pos_h[yi - yj + h - 1]  +  q_i . rel_pos_w[xi - xj + w - 1]

(q before the 1/sqrt(d) scale), so the bias depends on the query's content, not only on
the offset: it is computed inside the attention from q, per forward. A windowed block's
tables span its window (h = w = M), a global block's the model's patch grid; for another
grid a table is resized linearly to 2n - 1 rows (``F.interpolate``, ``align_corners=False``),
as the references do.
"""
import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from torch import nn

from .attention import MultiheadAttention
from .window_attention import round_up, window_token_order


def resize_axis_table(table, rows):
    """A decomposed table [L, d] resized linearly (``align_corners=False``) to [rows, d]."""
    return F.interpolate(table.t()[None].float(), size=rows, mode='linear',
                         align_corners=False)[0].t().to(table.dtype)


def axis_offsets(table, size):
    """The rows of a decomposed table for every (query, key) pair along one axis.

    Args:
        table: [L, d], made for a span of (L + 1) / 2 positions.
        size (int): n, the positions along the axis now.

    Returns:
        [n, n, d]: row ``i - j + n - 1`` of the table (resized linearly to 2n - 1 rows
        when L differs) for query position i and key position j.
    """
    if table.shape[0] != 2 * size - 1:
        table = resize_axis_table(table, 2 * size - 1)
    pos = torch.arange(size, device=table.device)
    return table[pos[:, None] - pos[None, :] + size - 1]


def decomposed_rel_pos(q, rel_pos_h, rel_pos_w, hw):
    """The decomposed relative position term of the logits.

    Args:
        q: [B, heads, h*w, d] queries of an h x w grid (row-major), unscaled.
        rel_pos_h, rel_pos_w: [Lh, d] and [Lw, d] tables (:func:`axis_offsets`).
        hw (tuple[int, int]): (h, w).

    Returns:
        [B, heads, h*w, h*w] in q's dtype: a float ``attn_mask`` for SDPA.
    """
    h, w = hw
    B, heads, n, d = q.shape
    q = q.reshape(B, heads, h, w, d)
    along_h = torch.einsum('bnyxc,ykc->bnyxk', q, axis_offsets(rel_pos_h, h).to(q.dtype))
    along_w = torch.einsum('bnyxc,xkc->bnyxk', q, axis_offsets(rel_pos_w, w).to(q.dtype))
    # [B, heads, h, w, h (key row), w (key column)]
    bias = along_h[..., :, None] + along_w[..., None, :]
    return bias.reshape(B, heads, n, n)


class WindowedAttention(MultiheadAttention):
    """Multi-head self-attention over the patch grid, in M x M windows or global, with an
    optional decomposed relative position term (ViTDet / SAM).

    The projections are :class:`~.attention.MultiheadAttention`'s (``qkv``, ``proj``:
    ViTDet's and SAM's own names and layout), so a block swaps one for the other.

    Args:
        embed_dims, num_heads, qkv_bias, attn_drop, proj_drop: as for
            :class:`~.attention.MultiheadAttention`.
        window_size (int): M; 0 attends over the whole grid.
        rel_pos_hw (tuple[int, int], optional): the span (h, w) of the decomposed tables
            (``rel_pos_h`` [2h-1, D/heads], ``rel_pos_w`` [2w-1, D/heads], zeros at first as
            ViTDet's and SAM's ``rel_pos_zero_init``); None: no relative position. A windowed
            layer's span is (M, M).

    Shapes:
        x: [B, h*w, D] tokens of the grid ``hw`` (no class token) -> [B, h*w, D].

    While attention is captured (``record``, :mod:`densevit.analysis.attention_capture`), a
    windowed layer records its windows' weights, [B * windows, heads, M*M, M*M], padded
    tokens included.
    """

    def __init__(self, embed_dims, num_heads, qkv_bias=True, attn_drop=0., proj_drop=0.,
                 window_size=0, rel_pos_hw=None):
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                         proj_drop=proj_drop)
        if window_size < 0:
            raise ValueError(f'window_size must be >= 0 (0: global attention), got {window_size}')
        self.window_size = window_size
        self.rel_pos_hw = None if rel_pos_hw is None else tuple(rel_pos_hw)
        if self.rel_pos_hw is not None:
            h, w = self.rel_pos_hw
            self.rel_pos_h = nn.Parameter(torch.zeros(2 * h - 1, self.head_dims))
            self.rel_pos_w = nn.Parameter(torch.zeros(2 * w - 1, self.head_dims))

    def forward(self, x, attn_mask=None, rope=None, hw=None):
        """x [B, h*w, D] normalised tokens of grid ``hw`` -> [B, h*w, D].

        ``attn_mask`` (a float bias over the whole grid) is added in a global layer and
        refused in a windowed one; ``rope`` is refused (the ViT refuses both combinations
        when it is built)."""
        if hw is None or x.shape[1] != hw[0] * hw[1]:
            raise ValueError(f'windowed attention / decomposed relative position need the whole '
                             f'patch grid: {x.shape[1]} tokens for grid {hw}')
        if rope is not None:
            raise ValueError('windowed attention / decomposed relative position take no RoPE')
        if not self.window_size:
            return self._grid_attention(x, tuple(hw), attn_mask)
        if attn_mask is not None:
            raise ValueError('a windowed attention layer takes no attention mask over the grid')
        return self._window_attention(x, tuple(hw))

    def _grid_attention(self, x, hw, attn_mask=None):
        """Attention over all tokens of an h x w grid (a window, or the whole grid)."""
        q, k, v = self.project_qkv(x)
        if self.rel_pos_hw is not None:
            bias = decomposed_rel_pos(q, self.rel_pos_h, self.rel_pos_w, hw)
            attn_mask = bias if attn_mask is None else bias + attn_mask
        return self.attend(q, k, v, attn_mask)

    def _window_attention(self, x, hw):
        """Zero-pad the grid to whole windows, attend in each, put the tokens back, crop."""
        B, _, C = x.shape
        (H, W), M = hw, self.window_size
        Hp, Wp = round_up(H, M), round_up(W, M)
        if Hp > H or Wp > W:
            x = F.pad(x.reshape(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H)).reshape(B, Hp * Wp, C)
        order, inverse = window_token_order(hw, M, 0, x.device)  # partition; back + crop
        windows = x.index_select(1, order).reshape(B * (Hp // M) * (Wp // M), M * M, C)
        out = self._grid_attention(windows, (M, M))
        return out.reshape(B, Hp * Wp, C).index_select(1, inverse)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A table made for another span (a global layer's grid at another image size) is
        # resized on load, linearly as at every forward. (A windowed layer's of another
        # window is refused before loading: densevit.checkpoint.vitdet.check_rel_pos.)
        for name in ('rel_pos_h', 'rel_pos_w'):
            key, own = prefix + name, getattr(self, name, None)
            table = state_dict.get(key)
            if own is None or table is None or table.dim() != 2 or table.shape == own.shape \
                    or table.shape[1] != own.shape[1]:
                continue
            print_log(f'Resizing {key} from {table.shape[0]} to {own.shape[0]} rows on load '
                      f'(a span of {(table.shape[0] + 1) // 2} -> {(own.shape[0] + 1) // 2})',
                      logger='current')
            state_dict[key] = resize_axis_table(table, own.shape[0])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self):
        return f'window_size={self.window_size}, rel_pos_hw={self.rel_pos_hw}'

