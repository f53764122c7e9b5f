"""Window self-attention with a relative position bias (Swin, Liu et al. 2021, Sec. 3.2).

Attention is computed inside non-overlapping M x M windows. Every head adds a
learned bias B[dy, dx] that depends only on the offset between two tokens of a
window: the position family's :class:`RelativePositionBias` made for an M x M
grid ((2M-1)^2 rows, one column per head; resized on load when a checkpoint
used another window).
"""
import functools

import torch
import torch.nn.functional as F
from torch import nn

from .relative_position import RelativePositionBias

# Added to the logits of token pairs that a shifted window joins across the
# image border. The official value: exp(-100) is 0 next to any real logit, and
# keeping it (not -inf) keeps our outputs equal to the reference's.
MASK_VALUE = -100.0


def window_partition(x, window_size):
    """[B, H, W, C] (H, W multiples of M) -> [B, nW, M*M, C], windows in row-major order."""
    B, H, W, C = x.shape
    M = window_size
    x = x.view(B, H // M, M, W // M, M, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // M) * (W // M), M * M, C)


def round_up(n, multiple):
    """``n`` rounded up to a multiple: ``ceil(n / multiple) * multiple``.

    Written as one floor division (not ``n + -n % multiple``) so that, under
    ``torch.export``, every size derived from a symbolic ``n`` stays a short expression:
    the nested remainders of four Swin stages otherwise take the exporter minutes.
    """
    return (n + multiple - 1) // multiple * multiple


def window_token_order(hw, window_size, shift_size=0, device=None):
    """See :func:`_window_token_order`; cached, except while exporting (the sizes are
    symbolic then, and the gathers' indices a part of the graph)."""
    if torch.compiler.is_exporting():
        return _window_token_order.__wrapped__(hw, window_size, shift_size, device)
    return _window_token_order(hw, window_size, shift_size, device)


@functools.lru_cache(maxsize=32)
def _window_token_order(hw, window_size, shift_size=0, device=None):
    """Two token gathers: roll + window partition, and window reverse + roll back + crop.

    For an H x W map zero-padded to Hp x Wp (multiples of M), rolled by ``-shift``
    on both axes and cut into windows, ``x.index_select(1, order)`` of the padded
    tokens [B, Hp*Wp, C] gives the windows as [B, nW*M*M, C] in one copy, and
    ``windows.index_select(1, inverse)`` puts the window tokens back, unrolled and
    cropped to [B, H*W, C] (instead of two to four copies each way).

    Args:
        hw (tuple[int, int]): unpadded map size (H, W).
    Returns:
        (order [Hp*Wp], inverse [H*W]) long. Cached per arguments: do not modify.
    """
    H, W = hw
    M, s = window_size, shift_size
    Hp, Wp = round_up(H, M), round_up(W, M)
    # Normal tensors even under inference_mode: index_select saves its index for backward.
    with torch.inference_mode(False):
        idx = torch.arange(Hp * Wp, device=device).view(1, Hp, Wp, 1)
        if s:
            idx = torch.roll(idx, shifts=(-s, -s), dims=(1, 2))
        order = window_partition(idx, M).reshape(-1)
        slot = torch.empty_like(order)
        slot[order] = torch.arange(order.numel(), device=device)
        inverse = slot.view(Hp, Wp)[:H, :W].reshape(-1)
    return order, inverse


def shifted_window_mask(hw, window_size, shift_size, device=None):
    """Additive mask that keeps a shifted window's attention inside one image region.

    After rolling the (padded) map by ``-shift`` each axis splits into three
    regions: [0, H-M), [H-M, H-s) and [H-s, H) (the last one wrapped round from
    the top/left). Tokens may attend only to tokens of the same region pair.

    Args:
        hw (tuple[int, int]): padded map size (H, W), multiples of M.
    Returns:
        [nW, M*M, M*M] float: 0 where allowed, ``MASK_VALUE`` elsewhere.
    """
    H, W = hw
    M, s = window_size, shift_size

    def regions(n):
        idx = torch.arange(n, device=device)
        return (idx >= n - M).long() + (idx >= n - s).long()

    label = regions(H)[:, None] * 3 + regions(W)[None, :]  # [H, W], 9 regions
    label = window_partition(label[None, :, :, None], M)[0, :, :, 0]  # [nW, M*M]
    same = label[:, :, None] == label[:, None, :]
    # (not zeros(same.shape).masked_fill_: exported with one window at the traced size, the
    # ONNX graph built that shape wrong, and ONNX Runtime failed at sizes with more windows)
    return torch.where(same, 0.0, MASK_VALUE)


class WindowMultiheadAttention(nn.Module):
    """Multi-head self-attention within windows, with a relative position bias.

    Projection names follow the official Swin code (``qkv``, ``proj``); the bias
    table is ``relative_position_bias.relative_position_bias_table`` (the
    official ``relative_position_bias_table`` one level up; converters rename).

    Args:
        embed_dims (int): C.
        num_heads (int): h.
        window_size (int): M.
        qkv_bias (bool): bias on the qkv projection.
        attn_drop (float): dropout on attention weights (training only).
        proj_drop (float): dropout after the output projection.

    Shapes:
        x: [B, nW, M*M, C]; mask: None or [nW, M*M, M*M] additive -> [B, nW, M*M, C].
    """

    def __init__(self, embed_dims, num_heads, window_size, qkv_bias=True, attn_drop=0.,
                 proj_drop=0.):
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by '
                             f'num_heads ({num_heads})')
        self.num_heads = num_heads
        self.window_size = window_size
        self.attn_drop = attn_drop
        self.relative_position_bias = RelativePositionBias((window_size, window_size), num_heads)
        self.qkv = nn.Linear(embed_dims, 3 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, mask=None):
        B, nW, N, C = x.shape
        h, M = self.num_heads, self.window_size
        # Windows go into SDPA's batch dimension: with 4D inputs it takes its fused
        # kernel, with 5D ([B, nW, h, N, d]) it falls back to the much slower math path.
        # [B, nW, N, 3C] -> 3 x [B*nW, h, N, C/h]
        q, k, v = self.qkv(x).view(B * nW, N, 3, h, C // h).permute(2, 0, 3, 1, 4).unbind(0)
        attn_mask = self.relative_position_bias((M, M)).to(q.dtype)  # [1, h, N, N], every window
        if mask is not None:
            attn_mask = attn_mask + mask.to(q.dtype)[:, None]  # [nW, h, N, N]
            # window w of image b is batch entry b*nW + w (B is symbolic under torch.export)
            if torch.compiler.is_exporting() or B > 1:
                attn_mask = attn_mask.expand(B, -1, -1, -1, -1).reshape(B * nW, h, N, N)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.attn_drop if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, nW, N, C)
        return self.proj_drop(self.proj(x))
