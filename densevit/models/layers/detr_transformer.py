"""DETR's encoder-decoder transformer (Carion et al. 2020, §3.2 and App. A.3).

Post-norm layers; position encodings are added to queries and keys (never to
values) at every attention layer: ``pos`` on encoder self-attention and on the
cross-attention keys, ``query_pos`` on decoder self-attention and on the
cross-attention queries. Sequences are batch-first: [B, N, D].
"""
import copy

import torch
from torch import nn


def _with_pos(x, pos):
    return x if pos is None else x + pos


class FFN(nn.Module):
    """Linear(D, F) -> ReLU -> dropout -> Linear(F, D)."""

    def __init__(self, embed_dims, feedforward_channels, dropout):
        super().__init__()
        self.linear1 = nn.Linear(embed_dims, feedforward_channels)
        self.linear2 = nn.Linear(feedforward_channels, embed_dims)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., D] -> [..., D]."""
        # ReLU in place on the [N, F] hidden layer: no second F-wide tensor (autograd's
        # backward of Linear needs its input, not its output). The tokens are flattened to
        # [N, D] first so that Linear's output is a tensor of its own: on the [B, L, F] view
        # Linear returns for a 3-D input, autograd would route the in-place ReLU's backward
        # through CopySlices (a zeroed F-wide buffer and copies: 19% slower here on the CPU)
        hidden = self.linear1(x.reshape(-1, x.shape[-1])).relu_()
        return self.linear2(self.dropout(hidden)).view(*x.shape[:-1], -1)


class DetrEncoderLayer(nn.Module):
    """Self-attention + FFN, each followed by dropout, residual and LayerNorm."""

    def __init__(self, embed_dims=256, num_heads=8, feedforward_channels=2048, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=dropout,
                                               batch_first=True)
        self.ffn = FFN(embed_dims, feedforward_channels, dropout)
        self.norm1 = nn.LayerNorm(embed_dims)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, pos=None, key_padding_mask=None):
        """src, pos [B, N, D]; key_padding_mask [B, N] bool (True = padding) -> [B, N, D]."""
        q = k = _with_pos(src, pos)
        attn = self.self_attn(q, k, src, key_padding_mask=key_padding_mask, need_weights=False)[0]
        src = self.norm1(src + self.dropout1(attn))
        return self.norm2(src + self.dropout2(self.ffn(src)))


class DetrDecoderLayer(nn.Module):
    """Self-attention over queries, cross-attention to the memory, FFN; post-norm.

    ``record_cross_attn`` (callable | None): set only while an analysis tool
    captures attention; it then gets the cross-attention weights [B, heads, Q, N]
    (``need_weights=True``, per head). None (the default) keeps the fast path.
    """

    def __init__(self, embed_dims=256, num_heads=8, feedforward_channels=2048, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=dropout,
                                               batch_first=True)
        self.cross_attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=dropout,
                                                batch_first=True)
        self.ffn = FFN(embed_dims, feedforward_channels, dropout)
        self.norm1 = nn.LayerNorm(embed_dims)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.norm3 = nn.LayerNorm(embed_dims)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.record_cross_attn = None

    def forward(self, tgt, memory, pos=None, query_pos=None, memory_key_padding_mask=None,
                self_attn_mask=None, cross_attn_bias=None):
        """tgt, query_pos [B, Q, D]; memory, pos [B, N, D]; memory_key_padding_mask [B, N].

        ``self_attn_mask`` ([Q, Q] or [B·heads, Q, Q], True = blocked) lets extra query
        groups (e.g. denoising queries) stay hidden from the matching queries.
        ``cross_attn_bias`` ([B·heads, Q, N] float, or None) is added to the scaled
        cross-attention logits before the softmax (Plain-DETR's box-to-pixel bias,
        ``layers/box_rpb.py``).
        """
        q = k = _with_pos(tgt, query_pos)
        attn = self.self_attn(q, k, tgt, attn_mask=self_attn_mask, need_weights=False)[0]
        tgt = self.norm1(tgt + self.dropout1(attn))
        capture = self.record_cross_attn is not None
        attn, weights = self.cross_attn(_with_pos(tgt, query_pos), _with_pos(memory, pos), memory,
                                        key_padding_mask=memory_key_padding_mask,
                                        attn_mask=cross_attn_bias,
                                        need_weights=capture, average_attn_weights=False)
        if capture:
            self.record_cross_attn(weights)
        tgt = self.norm2(tgt + self.dropout2(attn))
        return self.norm3(tgt + self.dropout3(self.ffn(tgt)))


class DetrTransformer(nn.Module):
    """Encoder (``num_encoder_layers``) + decoder (``num_decoder_layers``, final LayerNorm).

    Args:
        embed_dims (int): d_model (DETR: 256).
        num_heads (int): attention heads (8).
        feedforward_channels (int): FFN width (2048).
        dropout (float): on attention weights, after attention and in the FFN (0.1).
    """

    def __init__(self, embed_dims=256, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                 feedforward_channels=2048, dropout=0.1):
        super().__init__()
        enc = DetrEncoderLayer(embed_dims, num_heads, feedforward_channels, dropout)
        dec = DetrDecoderLayer(embed_dims, num_heads, feedforward_channels, dropout)
        self.encoder = nn.ModuleList(copy.deepcopy(enc) for _ in range(num_encoder_layers))
        self.decoder = nn.ModuleList(copy.deepcopy(dec) for _ in range(num_decoder_layers))
        self.decoder_norm = nn.LayerNorm(embed_dims)
        self.embed_dims = embed_dims
        self._reset_parameters()

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, mask, pos, query_pos, tgt=None, self_attn_mask=None):
        """Run encoder and decoder.

        Args:
            src [B, N, D]: flattened image features; mask [B, N] bool, True = padding.
            pos [B, N, D]: position encoding of ``src``.
            query_pos [B, Q, D]: learned object queries.
            tgt [B, Q, D]: decoder input (zeros when None, as in DETR).

        Returns:
            hs [L, B, Q, D]: every decoder layer's output after the final LayerNorm.
            memory [B, N, D]: encoder output.
        """
        memory = src
        for layer in self.encoder:
            memory = layer(memory, pos=pos, key_padding_mask=mask)
        out = torch.zeros_like(query_pos) if tgt is None else tgt
        hs = []
        for layer in self.decoder:
            out = layer(out, memory, pos=pos, query_pos=query_pos, memory_key_padding_mask=mask,
                        self_attn_mask=self_attn_mask)
            hs.append(self.decoder_norm(out))
        return torch.stack(hs), memory
