"""Multi-scale deformable attention (Zhu et al. 2021, Deformable DETR, §4.1, Eq. 3) in pure PyTorch.

Each query looks at ``P`` sampled points on each of ``L`` feature levels, per head
``M``; the points sit at the query's reference point plus learned offsets, are read
by bilinear interpolation with zero padding, and summed with softmax weights
(normalised over the ``L·P`` points of a head). No compiled op: every level is
sampled with ``F.grid_sample(bilinear, padding_mode='zeros', align_corners=False)``
at the grid ``2·loc − 1`` (a location in [0, 1] of the level's width/height maps
to grid_sample's [−1, 1] with pixel centres at (i + 0.5) / W).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from densevit.utils.precision import at_least_fp32


def level_shapes(spatial_shapes):
    """[(H_l, W_l), ...] from a [L, 2] tensor or a sequence of pairs. Pairs are kept as
    they are, so sizes read from ``tensor.shape`` stay symbolic under ``torch.export``
    (a tensor's values would be data-dependent there, and ``int()`` would fix them)."""
    if torch.is_tensor(spatial_shapes):
        return [tuple(hw) for hw in spatial_shapes.tolist()]
    return [tuple(hw) for hw in spatial_shapes]


def multi_scale_deformable_attn(value, spatial_shapes, sampling_locations, attention_weights,
                                layout=None):
    """The sampling-and-weighting core of deformable attention.

    Args:
        value (Tensor): [B, S, M, Dh] projected values of all levels, flattened
            level after level (S = Σ H_l·W_l), M heads of Dh channels.
        spatial_shapes (Tensor | list): [L, 2] (H_l, W_l) per level (see ``level_shapes``).
        sampling_locations (Tensor): [B, Q, M, L, P, 2] (x, y) in [0, 1] of each level.
        attention_weights (Tensor): [B, Q, M, L, P], already normalised.
        layout (str | None): ``'points'`` or ``'queries'`` (below); None picks points-major
            on the CPU without autograd and query-major otherwise.

    Returns:
        Tensor: [B, Q, M·Dh].

    Levels are sampled one at a time and accumulated, so the largest temporary is
    one level's samples (never all levels stacked). Two layouts of the samples, the same
    sums in the same order (equal to the last bit): on the CPU without autograd,
    points-major [B·M, Dh, P, Q], where grid_sample vectorises along the long query axis
    and the points add as whole rows; otherwise query-major [B·M, Dh, Q, P], whose backward
    is the faster one on the CPU, and which is faster on CUDA except in the encoder's forward
    (docs/benchmarks.md, sixth GPU run).
    ``benchmarks/bench_deform_attn.py`` times the forward with and without autograd against
    HF's.
    """
    B, S, M, Dh = value.shape
    _, Q, _, L, P, _ = sampling_locations.shape
    shapes = level_shapes(spatial_shapes)
    if layout is None:
        points_major = value.device.type == 'cpu' and not (torch.is_grad_enabled() and any(
            t.requires_grad for t in (value, sampling_locations, attention_weights)))
    elif layout in ('points', 'queries'):
        points_major = layout == 'points'
    else:
        raise ValueError(f"layout must be 'points', 'queries' or None, got {layout!r}")
    # level-major grids and weights. The weights are made contiguous (reshape alone returns
    # a strided view when B is 1, and the weighting is markedly slower on it); the grids are
    # left as reshape gives them: grid_sample's backward adds into the value map in another
    # order on a contiguous copy, so copying them would change the training numbers
    order, dims = ((3, 0, 2, 4, 1), (P, Q)) if points_major else ((3, 0, 2, 1, 4), (Q, P))
    grids = (2 * sampling_locations - 1).permute(*order, 5).reshape(L, B * M, *dims, 2)
    weights = attention_weights.permute(*order).reshape(L, B * M, 1, *dims).contiguous()
    out = None
    levels = value.split([h * w for h, w in shapes], dim=1)
    for lvl, (h, w) in enumerate(shapes):
        # [B, h·w, M, Dh] -> [B, M·Dh, h·w] -> [B·M, Dh, h, w]: one copy, whose backward
        # is a single strided copy too; split (not slicing) keeps the backward from
        # allocating a full-size gradient per level
        value_l = levels[lvl].flatten(2).transpose(1, 2).reshape(B * M, Dh, h, w)
        sampled = F.grid_sample(value_l, grids[lvl], mode='bilinear',
                                padding_mode='zeros', align_corners=False)
        if points_major:  # [B·M, Dh, P, Q] -> [B·M, Dh, Q], adding the points as sum does
            term = sampled[:, :, 0] * weights[lvl, :, :, 0]
            for p in range(1, P):
                term += sampled[:, :, p] * weights[lvl, :, :, p]
        else:  # [B·M, Dh, Q, P] -> [B·M, Dh, Q]
            term = (sampled * weights[lvl]).sum(-1)
        out = term if out is None else out + term
    # [B·M, Dh, Q] -> [B, Q, M·Dh]
    return out.view(B, M * Dh, Q).transpose(1, 2)


class MultiScaleDeformableAttention(nn.Module):
    """Deformable attention over L levels (the encoder's self-attention and the
    decoder's cross-attention of Deformable DETR).

    Args:
        embed_dims (int): D (256).
        num_heads (int): M (8).
        num_levels (int): L (4).
        num_points (int): P sampled points per head and level (4).

    Parameter names follow the paper's code: ``sampling_offsets`` (D -> M·L·P·2),
    ``attention_weights`` (D -> M·L·P), ``value_proj``, ``output_proj``.
    """

    def __init__(self, embed_dims=256, num_heads=8, num_levels=4, num_points=4):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} not divisible by num_heads {num_heads}')
        self.embed_dims, self.num_heads = embed_dims, num_heads
        self.num_levels, self.num_points = num_levels, num_points
        self.sampling_offsets = nn.Linear(embed_dims, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(embed_dims, num_heads * num_levels * num_points)
        self.value_proj = nn.Linear(embed_dims, embed_dims)
        self.output_proj = nn.Linear(embed_dims, embed_dims)
        self.reset_parameters()

    def reset_parameters(self):
        """Offsets start on a ring: head m points along angle 2πm/M, point p at distance p+1."""
        nn.init.zeros_(self.sampling_offsets.weight)
        theta = torch.arange(self.num_heads, dtype=torch.float32) * (2 * math.pi / self.num_heads)
        grid = torch.stack([theta.cos(), theta.sin()], -1)
        grid = grid / grid.abs().max(-1, keepdim=True).values  # onto the unit square
        grid = grid[:, None, None, :].repeat(1, self.num_levels, self.num_points, 1)
        grid = grid * torch.arange(1, self.num_points + 1, dtype=torch.float32)[:, None]
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, query, reference_points, value, spatial_shapes, value_padding_mask=None):
        """
        Args:
            query (Tensor): [B, Q, D] (position embedding already added).
            reference_points (Tensor): [B, Q, L, 2] normalised (x, y) per level, or
                [B, Q, L, 4] boxes (cx, cy, w, h): offsets are then scaled by the box
                half-size / P instead of by the level's size.
            value (Tensor): [B, S, D] flattened multi-scale features.
            spatial_shapes (Tensor | list): [L, 2] (H_l, W_l) (see ``level_shapes``).
            value_padding_mask (Tensor | None): [B, S] bool, True = padding (zeroed).

        Returns:
            Tensor: [B, Q, D].
        """
        B, Q, _ = query.shape
        M, L, P = self.num_heads, self.num_levels, self.num_points
        value = self.value_proj(value)
        if value_padding_mask is not None:
            value = value.masked_fill(value_padding_mask[..., None], 0.0)
        value = value.view(B, value.shape[1], M, self.embed_dims // M)
        # sampling locations in float32 under bf16 autocast: bf16 cannot even hold a level
        # width above 256 exactly (densevit/utils/precision.py)
        offsets = at_least_fp32(self.sampling_offsets(query)).view(B, Q, M, L, P, 2)
        weights = self.attention_weights(query).view(B, Q, M, L * P).softmax(-1)
        weights = weights.view(B, Q, M, L, P)
        if reference_points.shape[-1] == 2:
            # offsets are in pixels of each level: divide by (W_l, H_l)
            # per level, dividing by the sizes themselves: a tensor made of them would
            # fix an exported graph to one input size. unbind (not slicing): its backward
            # stacks the gradients instead of zero-filling a full-size one per slice
            offsets = torch.stack([torch.stack([x / w, y / h], -1)
                                   for (x, y), (h, w) in zip(
                                       (o.unbind(-1) for o in offsets.unbind(3)),
                                       level_shapes(spatial_shapes), strict=True)], 3)
            locations = reference_points[:, :, None, :, None, :] + offsets
        elif reference_points.shape[-1] == 4:
            locations = (reference_points[:, :, None, :, None, :2] + offsets / P
                         * reference_points[:, :, None, :, None, 2:] * 0.5)
        else:
            raise ValueError(f'reference_points must end in 2 or 4, got '
                             f'{tuple(reference_points.shape)}')
        out = multi_scale_deformable_attn(value, spatial_shapes, locations, weights)
        return self.output_proj(out)
