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

# a mixed qkv_bias: the per-part biases, in the fused projection's order
QKV_BIAS_NAMES = ('q_bias', 'k_bias', 'v_bias')


def qkv_bias_parts(qkv_bias):
    """``qkv_bias`` (a bool, or one per q, k, v) -> (q, k, v) bools."""
    parts = (qkv_bias,) * 3 if isinstance(qkv_bias, bool) else tuple(qkv_bias)
    if len(parts) != 3 or not all(isinstance(p, bool) for p in parts):
        raise ValueError(f'qkv_bias must be a bool or three bools (q, k, v), got {qkv_bias!r}')
    return parts


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
        qkv_bias (bool | tuple[bool, bool, bool]): bias on the qkv projection, or per
            part (q, k, v): DINOv3's checkpoints have ``(True, False, True)``, no key
            bias. Mixed, the fused ``qkv`` has no bias: those present are parameters
            ``q_bias`` / ``k_bias`` / ``v_bias`` [D], an absent one a zero buffer outside
            the state dict, never learned.
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
        parts = qkv_bias_parts(qkv_bias)
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=all(parts))
        self.split_bias = any(parts) and not all(parts)
        if self.split_bias:
            for name, learned in zip(QKV_BIAS_NAMES, parts, strict=True):
                if learned:
                    setattr(self, name, nn.Parameter(torch.zeros(embed_dims)))
                else:
                    self.register_buffer(name, torch.zeros(embed_dims), persistent=False)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.record = None

    def forward(self, x: torch.Tensor, attn_mask=None, rope=None, hw=None) -> torch.Tensor:
        """Self-attention over the token sequence.

        Args:
            x: [B, N, D] tokens.
            attn_mask: optional, broadcastable to [B, h, N, N]; a bool mask
                (True = may attend) or a float mask added to the logits
                (e.g. a relative position bias).
            rope: optional rotary position embedding of queries and keys, a
                :class:`~densevit.models.layers.rope_2d.Rotation` (cos / sin
                broadcastable to [B, h, N, D/(2h)]).
            hw: the patch grid (h, w) of the tokens; unused here (the windowed attention
                of :mod:`.vitdet_attention` reads it).

        Returns:
            [B, N, D].
        """
        q, k, v = self.project_qkv(x, rope)
        return self.attend(q, k, v, attn_mask)

    def project_qkv(self, x, rope=None):
        """x [B, N, D] -> q, k, v [B, h, N, D/h], q and k rotated by ``rope`` if given."""
        B, N, D = x.shape
        if self.split_bias:
            bias = torch.cat([getattr(self, name) for name in QKV_BIAS_NAMES])
            qkv = F.linear(x, self.qkv.weight, bias)
        else:
            qkv = self.qkv(x)
        # [B, N, 3D] -> [3, B, h, N, D/h]
        qkv = qkv.reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)
        if N >= CONTIGUOUS_QKV_MIN_TOKENS and qkv.device.type == 'cpu':
            qkv = qkv.contiguous()
        q, k, v = qkv.unbind(0)
        if rope is not None:
            q, k = rope.apply(q), rope.apply(k)
        return q, k, v

    def attend(self, q, k, v, attn_mask=None):
        """q, k, v [B, h, N, D/h] -> softmax(q kᵀ / sqrt(d) + mask) v, heads joined and
        projected: [B, N, D]."""
        if self.record is not None:
            # Computed beside SDPA, not instead of it: the output stays bit-identical.
            self.record(attention_weights(q, k, attn_mask))
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask,
            dropout_p=self.attn_drop if self.training else 0.)
        B, _, N, _ = q.shape
        x = x.transpose(1, 2).reshape(B, N, self.embed_dims)
        return self.proj_drop(self.proj(x))
