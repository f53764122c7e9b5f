"""Multi-head self-attention computed with ``F.scaled_dot_product_attention``."""
import math

import torch
import torch.nn.functional as F
from torch import nn

# From this many tokens on, q, k and v are copied out of the fused projection's
# [B, N, 3, h, d] rows before CPU SDPA. Strided, consecutive keys of a head lie one
# 3D-float row apart (9 KB for ViT-B, more than a page), and the fused kernel then
# runs 8-20% slower (copy included) at N = 1025-3800 (ViT-B/16 at 512² up to
# detection sizes); at N ~ 200 the copy costs more than it saves.
CONTIGUOUS_QKV_MIN_TOKENS = 512


def attention_weights(q, k, attn_mask=None):
    """softmax(q kᵀ / sqrt(d) + mask): the weights SDPA uses but never returns.

    Args:
        q, k: [B, h, N, d] and [B, h, M, d].
        attn_mask: as for SDPA: bool (True = may attend) or float (added to logits).

    Returns:
        [B, h, N, M] float32, rows summing to 1.
    """
    logits = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attn_mask, float('-inf'))
        else:
            logits = logits + attn_mask.float()
    return logits.softmax(-1)


class MultiheadAttention(nn.Module):
    """Multi-head self-attention (Vaswani et al. 2017) with a fused qkv projection.

    Parameter names ``qkv`` and ``proj`` follow timm's ViT so its weights map
    one-to-one. The attention itself goes through PyTorch's fused SDPA kernel
    (flash / memory-efficient where available) instead of materialising the
    softmax here.

    Args:
        embed_dims (int): token width D (split into ``num_heads`` heads of D/h).
        num_heads (int): number of heads h.
        qkv_bias (bool): bias on the qkv projection.
        attn_drop (float): dropout on attention weights (training only).
        proj_drop (float): dropout after the output projection.

    Attributes:
        record (callable | None): set only while an analysis tool captures
            attention (``densevit.analysis.attention_capture``); it is
            called with the weights [B, h, N, N] computed beside SDPA, whose
            output is used unchanged. None (the default) costs nothing.
    """

    def __init__(self, embed_dims, num_heads, qkv_bias=True, attn_drop=0., proj_drop=0.):
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by '
                             f'num_heads ({num_heads})')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.record = None

    def forward(self, x: torch.Tensor, attn_mask=None, rope=None) -> torch.Tensor:
        """Self-attention over the token sequence.

        Args:
            x: [B, N, D] tokens.
            attn_mask: optional, broadcastable to [B, h, N, N]; a bool mask
                (True = may attend) or a float mask added to the logits
                (e.g. a relative position bias).
            rope: optional rotary position embedding of queries and keys, a
                :class:`~densevit.models.layers.rope_2d.Rotation` (cos / sin
                broadcastable to [B, h, N, D/(2h)]).

        Returns:
            [B, N, D].
        """
        B, N, D = x.shape
        # [B, N, 3D] -> [3, B, h, N, D/h]
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)
        if N >= CONTIGUOUS_QKV_MIN_TOKENS and qkv.device.type == 'cpu':
            qkv = qkv.contiguous()
        q, k, v = qkv.unbind(0)
        if rope is not None:
            q, k = rope.apply(q), rope.apply(k)
        if self.record is not None:
            # Computed beside SDPA, not instead of it: the output stays bit-identical.
            self.record(attention_weights(q, k, attn_mask))
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask,
            dropout_p=self.attn_drop if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, D)
        return self.proj_drop(self.proj(x))
