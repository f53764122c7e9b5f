"""DETR's attention maps of the object queries over the encoder's memory (Carion et al. 2020,
Sec. 4.4 and Fig. 8: the "multi-head attention" box of the panoptic head).

Each decoder output embedding (a query) attends to the encoder output with its own query and
key projections, as one cross-attention layer would, but only the attention weights are kept:
one low-resolution heatmap per query and head, the input of the mask head's convolutions.
"""
import torch
from torch import nn


class QueryAttentionMap(nn.Module):
    """Per-query, per-head attention weights over the pixels of a map.

    ``w[b, q, n, y, x] = softmax(<q_proj(h_bq)_n, k_proj(m_b[:, y, x])_n> / sqrt(D / N))``,
    the softmax taken over heads *and* pixels together, as DETR's code does (the paper's
    figure draws one map per head; their values are not normalised per head). Padded pixels
    get no weight.

    Args:
        embed_dims (int): D, the width of the queries and the memory.
        num_heads (int): N heads (D divisible by N).

    Shapes:
        queries [B, Q, D], memory [B, D, h, w], padding mask [B, h, w] bool (True = padding)
        -> [B, Q, N, h, w].
    """

    def __init__(self, embed_dims, num_heads):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'QueryAttentionMap: embed_dims {embed_dims} is not divisible by '
                             f'num_heads {num_heads}')
        self.num_heads = num_heads
        self.scale = (embed_dims // num_heads) ** -0.5
        self.q_proj = nn.Linear(embed_dims, embed_dims)
        self.k_proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, queries, memory, padding_mask=None):
        B, Q, _ = queries.shape
        h, w = memory.shape[-2:]
        q = self.q_proj(queries).view(B, Q, self.num_heads, -1)  # [B, Q, N, d]
        k = self.k_proj(memory.flatten(2).transpose(1, 2))  # [B, hw, D]
        k = k.view(B, h * w, self.num_heads, -1)  # [B, hw, N, d]
        logits = torch.einsum('bqnd,bpnd->bqnp', q * self.scale, k)  # [B, Q, N, hw]
        if padding_mask is not None:
            logits = logits.masked_fill(padding_mask.flatten(1)[:, None, None], float('-inf'))
        weights = logits.flatten(2).softmax(-1)  # over heads and pixels together
        return weights.view(B, Q, self.num_heads, h, w)
