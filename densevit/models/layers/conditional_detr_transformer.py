"""Conditional DETR's transformer (Meng et al. 2021, "Conditional DETR for Fast Training
Convergence", §3.3).

The encoder is DETR's (``DetrEncoderLayer``). The decoder keeps content and position
apart: every attention projects them with separate linear layers. In cross-attention
each head's query is the concatenation of its content query ``c_q`` and its *spatial
query* ``p_q = T(f) ⊙ sine(s)``, where ``s`` is the reference point (a learned function
of the object query), ``sine`` the 2-d sinusoidal encoding and ``T`` an FFN of the
decoder embedding ``f`` (the identity in the first layer); each head's key is the
concatenation of its content key and its position key. So the dot product is the sum
of a content term and a spatial term, which lets the spatial query pick the extremity
regions of its object. In the first layer only, the positional query (the learned
object query) is added to the content query and the position key to the content key,
as in DETR.

DAB-DETR's decoder layer (``dab_detr_transformer.py``) is this layer. Sequences are
batch-first: [B, N, D].
"""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from .detr_transformer import FFN, DetrEncoderLayer
from .mlp import MLP


def anchor_sine(coords, num_feats, temperature=10000):
    """Sinusoidal encoding of normalised anchor coordinates (the papers' ``PE``).

    Args:
        coords: [..., n] in [0, 1], ordered (x, y) or (x, y, w, h).
        num_feats (int): features per coordinate (interleaved sin / cos).

    Returns:
        [..., n * num_feats]: y's features first, then x's (DETR's order for the image
        encoding), then w's and h's. The frequencies are computed in float32 (as the
        reference implementations do) whatever the dtype of ``coords``.
    """
    dim_t = torch.arange(num_feats, dtype=torch.float32, device=coords.device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode='floor') / num_feats)
    parts = []
    for c in coords.unbind(-1):
        e = c[..., None] * (2 * math.pi) / dim_t
        parts.append(torch.stack([e[..., 0::2].sin(), e[..., 1::2].cos()], -1).flatten(-2))
    if len(parts) > 1:
        parts[0], parts[1] = parts[1], parts[0]
    return torch.cat(parts, -1).to(coords.dtype)


def attend(q, k, v, num_heads, key_padding_mask=None, dropout=0.0):
    """Scaled dot-product attention per head.

    Args:
        q [B, Q, H·d], k [B, N, H·d], v [B, N, H·dv]: heads side by side in the last dim
            (q / k may be wider per head than v: Conditional DETR's concatenation).
        key_padding_mask [B, N] bool: True = padding (never attended).
        dropout (float): on the attention weights.

    Returns:
        [B, Q, H·dv]; logits scaled by 1/√d.
    """
    B, Q, _ = q.shape
    q, k, v = (t.unflatten(-1, (num_heads, -1)).transpose(1, 2) for t in (q, k, v))
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    return out.transpose(1, 2).reshape(B, Q, -1)


def per_head_concat(a, b, num_heads):
    """a, b [..., H·d] -> [..., H·2d]: each head's d channels of ``a`` then of ``b``."""
    return torch.cat([a.unflatten(-1, (num_heads, -1)), b.unflatten(-1, (num_heads, -1))],
                     -1).flatten(-2)


class ActivationFFN(FFN):
    """DETR's FFN with another activation between its layers (DAB-DETR: PReLU, one
    learned slope)."""

    def __init__(self, embed_dims, feedforward_channels, dropout, activation='prelu'):
        super().__init__(embed_dims, feedforward_channels, dropout)
        if activation != 'prelu':
            raise ValueError(f"FFN activation must be 'relu' or 'prelu', got {activation!r}")
        self.activation = nn.PReLU()

    def forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def build_ffn(embed_dims, feedforward_channels, dropout, activation='relu'):
    """DETR's ``FFN`` (ReLU) or an :class:`ActivationFFN`."""
    if activation == 'relu':
        return FFN(embed_dims, feedforward_channels, dropout)
    return ActivationFFN(embed_dims, feedforward_channels, dropout, activation)


class ContentPositionSelfAttention(nn.Module):
    """Self-attention over queries with separate content and position projections:
    q = W_qc·x + W_qp·p, k = W_kc·x + W_kp·p, v = W_v·x (x, p [B, Q, D])."""

    def __init__(self, embed_dims, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        for name in ('q_content', 'q_pos', 'k_content', 'k_pos', 'value', 'out_proj'):
            setattr(self, name, nn.Linear(embed_dims, embed_dims))

    def forward(self, x, query_pos):
        """x, query_pos [B, Q, D] -> [B, Q, D]."""
        q = self.q_content(x) + self.q_pos(query_pos)
        k = self.k_content(x) + self.k_pos(query_pos)
        drop = self.dropout if self.training else 0.0
        return self.out_proj(attend(q, k, self.value(x), self.num_heads, dropout=drop))


class ConditionalCrossAttention(nn.Module):
    """Conditional cross-attention: per head, query = [c_q ; W_s·p_q] and key =
    [c_k ; W_kp·pos] (widths 2D / H), value = W_v·memory.

    Args:
        with_query_pos (bool): also add W_qp·query_pos to c_q and W_kp·pos to c_k
            (Conditional DETR's first layer; DAB-DETR's first, or every with
            ``keep_query_pos``). Without it the layer has no ``q_pos``.
    """

    def __init__(self, embed_dims, num_heads, dropout=0.0, with_query_pos=False):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        for name in ('q_content', 'k_content', 'k_pos', 'value', 'q_spatial', 'out_proj'):
            setattr(self, name, nn.Linear(embed_dims, embed_dims))
        self.q_pos = nn.Linear(embed_dims, embed_dims) if with_query_pos else None

    def forward(self, x, memory, pos, query_spatial, query_pos=None, key_padding_mask=None):
        """x, query_spatial, query_pos [B, Q, D]; memory, pos [B, N, D];
        key_padding_mask [B, N] (True = padding) -> [B, Q, D]."""
        q, k, key_pos = self.q_content(x), self.k_content(memory), self.k_pos(pos)
        if self.q_pos is not None:
            q = q + self.q_pos(query_pos)
            k = k + key_pos
        q = per_head_concat(q, self.q_spatial(query_spatial), self.num_heads)
        k = per_head_concat(k, key_pos, self.num_heads)
        drop = self.dropout if self.training else 0.0
        return self.out_proj(attend(q, k, self.value(memory), self.num_heads, key_padding_mask,
                                    drop))


class ConditionalDecoderLayer(nn.Module):
    """Self-attention, conditional cross-attention, FFN; each followed by dropout,
    residual and LayerNorm (post-norm, as DETR). Attention weights get ``dropout`` too.

    Args:
        with_query_pos (bool): see :class:`ConditionalCrossAttention`.
        activation (str): of the FFN, 'relu' (Conditional DETR) or 'prelu' (DAB-DETR).
    """

    def __init__(self, embed_dims=256, num_heads=8, feedforward_channels=2048, dropout=0.1,
                 with_query_pos=False, activation='relu'):
        super().__init__()
        self.self_attn = ContentPositionSelfAttention(embed_dims, num_heads, dropout)
        self.cross_attn = ConditionalCrossAttention(embed_dims, num_heads, dropout,
                                                    with_query_pos)
        self.ffn = build_ffn(embed_dims, feedforward_channels, dropout, activation)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(embed_dims) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))

    def forward(self, tgt, memory, pos, query_pos, query_spatial, memory_key_padding_mask=None):
        """tgt, query_pos, query_spatial [B, Q, D]; memory, pos [B, N, D];
        memory_key_padding_mask [B, N] -> [B, Q, D]."""
        x = self.norm1(tgt + self.dropout1(self.self_attn(tgt, query_pos)))
        attn = self.cross_attn(x, memory, pos, query_spatial, query_pos, memory_key_padding_mask)
        x = self.norm2(x + self.dropout2(attn))
        return self.norm3(x + self.dropout3(self.ffn(x)))


class ConditionalDetrTransformer(nn.Module):
    """DETR's encoder + Conditional DETR's decoder (final LayerNorm on every layer's output).

    Args:
        embed_dims (int): D (256). num_heads (int): 8.
        num_encoder_layers, num_decoder_layers (int): 6, 6.
        feedforward_channels (int): FFN width (2048).
        dropout (float): after attention, in the FFN and on attention weights (0.1).
        activation (str): FFN activation of the decoder ('relu').
        keep_query_pos (bool): the positional query in every layer's cross-attention,
            not only the first.

    Modules besides the layers: ``ref_point_head`` (MLP D -> D -> 2: the reference point
    s = sigmoid(MLP(object query))), ``query_scale`` (MLP D -> D -> D: T(f)).
    """

    def __init__(self, embed_dims=256, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                 feedforward_channels=2048, dropout=0.1, activation='relu', keep_query_pos=False):
        super().__init__()
        enc = DetrEncoderLayer(embed_dims, num_heads, feedforward_channels, dropout)
        enc.ffn = build_ffn(embed_dims, feedforward_channels, dropout, activation)
        self.encoder = nn.ModuleList(copy.deepcopy(enc) for _ in range(num_encoder_layers))
        self.decoder = nn.ModuleList(
            ConditionalDecoderLayer(embed_dims, num_heads, feedforward_channels, dropout,
                                    with_query_pos=i == 0 or keep_query_pos, activation=activation)
            for i in range(num_decoder_layers))
        self.decoder_norm = nn.LayerNorm(embed_dims)
        self.query_scale = MLP(embed_dims, embed_dims, embed_dims, 2)
        self.ref_point_head = self.build_ref_point_head(embed_dims)
        self.embed_dims = embed_dims
        self._reset_parameters()

    @staticmethod
    def build_ref_point_head(embed_dims):
        """object query [.., D] -> reference point logits [.., 2]."""
        return MLP(embed_dims, embed_dims, 2, 2)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, mask, pos):
        """src, pos [B, N, D]; mask [B, N] (True = padding) -> memory [B, N, D]."""
        for layer in self.encoder:
            src = layer(src, pos=pos, key_padding_mask=mask)
        return src

    def forward(self, src, mask, pos, query_pos):
        """Run encoder and decoder.

        Args:
            src [B, N, D]: flattened image features; mask [B, N] bool, True = padding.
            pos [B, N, D]: position encoding of ``src``.
            query_pos [B, Q, D]: the learned object queries (positional queries).

        Returns:
            hs [L, B, Q, D]: every decoder layer's output after the final LayerNorm.
            reference [B, Q, 2]: the reference points s (normalised x, y), the same for
            every layer.
        """
        memory = self.encode(src, mask, pos)
        reference = self.ref_point_head(query_pos).sigmoid()
        sine = anchor_sine(reference, self.embed_dims // 2)
        out = torch.zeros_like(query_pos)
        hs = []
        for i, layer in enumerate(self.decoder):
            spatial = sine if i == 0 else sine * self.query_scale(out)
            out = layer(out, memory, pos, query_pos, spatial, mask)
            hs.append(self.decoder_norm(out))
        return torch.stack(hs), reference
