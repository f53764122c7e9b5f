"""Deformable DETR's encoder and decoder (Zhu et al. 2021, §4.1 and App. A.2).

Encoder: every pixel of every level is a query of multi-scale deformable
self-attention, its reference point being its own (normalised) position.
Decoder: standard self-attention among the object queries, deformable
cross-attention to the encoder memory around each query's reference point.
Post-norm layers as DETR. Sequences are batch-first; the L levels are
flattened one after another (S = Σ H_l·W_l).
"""
import copy

import torch
from torch import nn

from densevit.utils.precision import run_in_fp32

from .detr_transformer import FFN
from .ms_deform_attn import MultiScaleDeformableAttention, level_shapes


def inverse_sigmoid(x, eps=1e-5):
    """log(x / (1 − x)) with x clamped to [0, 1] and both terms to ≥ eps."""
    x = x.clamp(0, 1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def valid_ratios(masks):
    """masks: list of [B, H_l, W_l] bool (True = padding) -> [B, L, 2] (w, h) fraction of
    each level covered by the image."""
    ratios = []
    for m in masks:
        H, W = m.shape[-2:]
        h = (~m[:, :, 0]).sum(1).float() / H
        w = (~m[:, 0, :]).sum(1).float() / W
        ratios.append(torch.stack([w, h], -1))
    return torch.stack(ratios, 1)


def encoder_reference_points(spatial_shapes, ratios):
    """Pixel centres of every level, normalised by the valid (unpadded) size, seen from
    every level: spatial_shapes [L, 2] (tensor or pairs), ratios [B, L, 2] -> [B, S, L, 2] (x, y).
    The centres are ``arange + 0.5`` (equal to ``linspace(0.5, H - 0.5, H)``; exportable with
    a symbolic H)."""
    refs = []
    for lvl, (H, W) in enumerate(level_shapes(spatial_shapes)):
        y, x = torch.meshgrid(
            torch.arange(H, dtype=torch.float32, device=ratios.device) + 0.5,
            torch.arange(W, dtype=torch.float32, device=ratios.device) + 0.5,
            indexing='ij')
        y = y.reshape(-1)[None] / (ratios[:, None, lvl, 1] * H)
        x = x.reshape(-1)[None] / (ratios[:, None, lvl, 0] * W)
        refs.append(torch.stack([x, y], -1))
    return torch.cat(refs, 1)[:, :, None] * ratios[:, None]


class DeformableEncoderLayer(nn.Module):
    """Deformable self-attention + FFN, each with dropout, residual and LayerNorm."""

    def __init__(self, embed_dims=256, num_heads=8, num_levels=4, num_points=4,
                 feedforward_channels=1024, dropout=0.1):
        super().__init__()
        self.self_attn = MultiScaleDeformableAttention(embed_dims, num_heads, num_levels,
                                                       num_points)
        self.ffn = FFN(embed_dims, feedforward_channels, dropout)
        self.norm1 = nn.LayerNorm(embed_dims)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, pos, reference_points, spatial_shapes, padding_mask=None):
        """src, pos [B, S, D]; reference_points [B, S, L, 2]; padding_mask [B, S] -> [B, S, D]."""
        attn = self.self_attn(src + pos, reference_points, src, spatial_shapes, padding_mask)
        src = self.norm1(src + self.dropout1(attn))
        return self.norm2(src + self.dropout2(self.ffn(src)))


class DeformableDecoderLayer(nn.Module):
    """Self-attention among queries, deformable cross-attention, FFN; post-norm."""

    def __init__(self, embed_dims=256, num_heads=8, num_levels=4, num_points=4,
                 feedforward_channels=1024, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=dropout,
                                               batch_first=True)
        self.cross_attn = MultiScaleDeformableAttention(embed_dims, num_heads, num_levels,
                                                        num_points)
        self.ffn = FFN(embed_dims, feedforward_channels, dropout)
        self.norm1 = nn.LayerNorm(embed_dims)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.norm3 = nn.LayerNorm(embed_dims)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, tgt, query_pos, reference_points, memory, spatial_shapes,
                memory_padding_mask=None, self_attn_mask=None):
        """tgt, query_pos [B, Q, D]; reference_points [B, Q, L, 2 or 4]; memory [B, S, D];
        self_attn_mask [Q, Q] bool (True = blocked) -> [B, Q, D]."""
        q = k = tgt + query_pos
        attn = self.self_attn(q, k, tgt, attn_mask=self_attn_mask, need_weights=False)[0]
        tgt = self.norm1(tgt + self.dropout1(attn))
        attn = self.cross_attn(tgt + query_pos, reference_points, memory, spatial_shapes,
                               memory_padding_mask)
        tgt = self.norm2(tgt + self.dropout2(attn))
        return self.norm3(tgt + self.dropout3(self.ffn(tgt)))


class DeformableDetrTransformer(nn.Module):
    """Deformable encoder + decoder over L levels, with per-level learned ``level_embed``.

    Args:
        embed_dims (int): D (256). num_heads (int): M (8). num_levels (int): L (4).
        num_points (int): P (4). num_encoder_layers, num_decoder_layers (int): 6, 6.
        feedforward_channels (int): FFN width (1024). dropout (float): 0.1.
    """

    def __init__(self, embed_dims=256, num_heads=8, num_levels=4, num_points=4,
                 num_encoder_layers=6, num_decoder_layers=6, feedforward_channels=1024,
                 dropout=0.1):
        super().__init__()
        args = (embed_dims, num_heads, num_levels, num_points, feedforward_channels, dropout)
        enc, dec = DeformableEncoderLayer(*args), DeformableDecoderLayer(*args)
        self.encoder = nn.ModuleList(copy.deepcopy(enc) for _ in range(num_encoder_layers))
        self.decoder = nn.ModuleList(copy.deepcopy(dec) for _ in range(num_decoder_layers))
        self.level_embed = nn.Parameter(torch.empty(num_levels, embed_dims))
        self.embed_dims, self.num_levels = embed_dims, num_levels
        self._reset_parameters()

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for m in self.modules():
            if isinstance(m, MultiScaleDeformableAttention):
                m.reset_parameters()
        nn.init.normal_(self.level_embed)

    @staticmethod
    def flatten_levels(srcs, masks, pos_embeds, level_embed):
        """Per-level [B, D, H_l, W_l] maps, masks [B, H_l, W_l], positions -> src [B, S, D],
        mask [B, S], pos [B, S, D] (+ level embedding), spatial_shapes: [(H_l, W_l)] per
        level, Python sizes (symbolic under ``torch.export``, so an exported graph takes
        any input size; a [L, 2] tensor's values would be baked in)."""
        shapes = [tuple(s.shape[-2:]) for s in srcs]
        src = torch.cat([s.flatten(2).transpose(1, 2) for s in srcs], 1)
        mask = torch.cat([m.flatten(1) for m in masks], 1)
        pos = torch.cat([p.flatten(2).transpose(1, 2) + level_embed[lvl]
                         for lvl, p in enumerate(pos_embeds)], 1)
        return src, mask, pos, shapes

    def encode(self, srcs, masks, pos_embeds):
        """-> memory [B, S, D], mask [B, S], spatial_shapes [L, 2], valid ratios [B, L, 2]."""
        src, mask, pos, shapes = self.flatten_levels(srcs, masks, pos_embeds, self.level_embed)
        ratios = valid_ratios(masks)
        refs = encoder_reference_points(shapes, ratios)
        for layer in self.encoder:
            src = layer(src, pos, refs, shapes, mask)
        return src, mask, shapes, ratios

    def decode(self, tgt, query_pos, reference_points, memory, mask, shapes, ratios,
               bbox_embed=None, self_attn_mask=None, query_pos_fn=None,
               look_forward_twice=False, refine_eps=1e-5, out_norm=None):
        """Run the decoder.

        Args:
            tgt, query_pos (Tensor): [B, Q, D] (``query_pos`` None with ``query_pos_fn``).
            reference_points (Tensor): [B, Q, 2] (x, y) or [B, Q, 4] (cx, cy, w, h) in [0, 1]
                of the unpadded image.
            bbox_embed (nn.ModuleList | None): per-layer box predictors for iterative box
                refinement: after layer i, the reference becomes its box prediction
                (detached); None keeps the initial reference.
            query_pos_fn (callable | None): every layer's positional query is
                ``query_pos_fn(box)`` [B, Q, D] of its reference box [B, Q, 4] in the padded
                map (DINO: an MLP of the box's sine embedding).
            look_forward_twice (bool): the reference layer i+1's output is relative to is
                layer i's prediction *with* its gradient (DINO); the one its deformable
                attention samples around stays detached.
            refine_eps (float): ``inverse_sigmoid``'s eps in the refinement (DINO's: 1e-3).
            out_norm (nn.Module | None): a LayerNorm applied to every layer's returned output
                (not to what the next layer reads).

        Returns:
            hs [N_layers, B, Q, D]; references: list (one per layer) of [B, Q, 2 or 4],
            the reference each layer's output is relative to.
        """
        hs, refs = [], []
        out, prev = tgt, reference_points
        for i, layer in enumerate(self.decoder):
            scale = ratios if reference_points.shape[-1] == 2 else torch.cat([ratios, ratios], -1)
            ref_input = reference_points[:, :, None] * scale[:, None]
            if query_pos_fn is not None:
                query_pos = query_pos_fn(ref_input[:, :, 0])
            out = layer(out, query_pos, ref_input, memory, shapes, mask, self_attn_mask)
            hs.append(out if out_norm is None else out_norm(out))
            refs.append(prev)
            if bbox_embed is not None:
                delta = run_in_fp32(bbox_embed[i], out)  # refinement in float32 under bf16
                old = inverse_sigmoid(reference_points, eps=refine_eps)
                if reference_points.shape[-1] == 4:
                    new = (delta + old).sigmoid()
                else:
                    new = torch.cat([delta[..., :2] + old, delta[..., 2:]], -1).sigmoid()
                reference_points = new.detach()
            prev = new if look_forward_twice and bbox_embed is not None else reference_points
        return torch.stack(hs), refs
