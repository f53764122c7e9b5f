"""Mask2Former's pixel decoder (Cheng et al. 2022, Sec. 3.2 and 4.1, "MSDeformAttn" pixel
decoder): a Deformable DETR encoder (Zhu et al. 2021) over the backbone's three coarsest maps,
then an FPN step to the finest map, whose output is the per-pixel embedding the masks are
read from."""
import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.deformable_detr_transformer import (
    DeformableDetrTransformer,
    DeformableEncoderLayer,
    encoder_reference_points,
)
from densevit.models.layers.ms_deform_attn import MultiScaleDeformableAttention
from densevit.models.layers.own_init import ResetAfterChildrenInit
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default


def position_dtype(x):
    """The dtype sine positions are computed in for maps ``x``: float32, or float64 for a
    float64 model (half-precision maps get float32 positions)."""
    return torch.promote_types(x.dtype, torch.float32)


def sine_positions(encoding, x):
    """``encoding`` (:class:`SinePositionalEncoding2D`) of a map x [B, C, H, W] with no
    padding -> [B, H*W, 2 * num_feats] in x's dtype."""
    mask = x.new_zeros((x.shape[0], *x.shape[-2:]), dtype=torch.bool)
    return encoding(mask, position_dtype(x)).to(x.dtype).flatten(2).transpose(1, 2)


@MODELS.register_module()
class MSDeformAttnPixelDecoder(ResetAfterChildrenInit, BaseModule):
    """Per-pixel embedding and multi-scale memory from a backbone's maps.

    The last ``num_levels`` maps (strides 8, 16, 32 of a 4-level backbone) are projected to
    D channels (1x1 convolution + GroupNorm, ``input_proj``), get sine positions and a learned
    ``level_embed`` each, and go through ``num_encoder_layers`` Deformable DETR encoder layers
    (:class:`~densevit.models.layers.deformable_detr_transformer.DeformableEncoderLayer`: every
    pixel a query of multi-scale deformable self-attention over all levels); the result, split
    back into maps, is the memory the transformer decoder attends to. The maps before them
    (stride 4) join an FPN top-down path, each a 1x1 lateral convolution (``lateral_convs``)
    added to the bilinearly upsampled coarser output, then a 3x3 convolution (``output_convs``;
    GroupNorm, ReLU); a 1x1 convolution of the finest output (``mask_feature``) is the
    per-pixel embedding. As the paper's code, the levels are ordered coarsest first (the
    ``level_embed`` rows, the deformable attention's level axis) and no padding mask is used
    (padded pixels are attended to like the others).

    Args:
        in_channels (Sequence[int]): channels of every backbone map, finest first.
        feat_channels (int): D (256).
        out_channels (int): channels of the per-pixel embedding (256).
        num_levels (int): how many of the last maps the encoder reads (3).
        num_encoder_layers (int): 6.
        num_heads, num_points (int): deformable attention's heads and points per head and
            level (8, 4).
        feedforward_channels (int): the encoder's FFN width (1024).
        dropout (float): the encoder's dropout (0.0).
        norm_cfg (dict): ``dict(type='GN', num_groups=32)``.

    Shapes:
        forward(maps: tuple of [B, C_i, H_i, W_i], finest first) -> (mask features
        [B, out_channels, H_0, W_0], memory: list of ``num_levels`` [B, D, H_l, W_l],
        coarsest first).
    """

    def __init__(self, in_channels, feat_channels=256, out_channels=256, num_levels=3,
                 num_encoder_layers=6, num_heads=8, num_points=4, feedforward_channels=1024,
                 dropout=0.0, norm_cfg=DEFAULT, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        norm_cfg = resolve_default(norm_cfg, dict(type='GN', num_groups=32))
        in_channels = list(in_channels)
        if not 1 <= num_levels <= len(in_channels):
            raise ValueError(f'MSDeformAttnPixelDecoder: num_levels={num_levels} asks for '
                             f'{num_levels} encoder levels, but in_channels={in_channels} '
                             f'names {len(in_channels)} maps')
        D = feat_channels
        self.in_channels, self.num_levels = in_channels, num_levels
        self.feat_channels, self.out_channels = feat_channels, out_channels
        self.input_proj = nn.ModuleList(
            ConvModule(c, D, 1, bias=True, norm_cfg=norm_cfg, act_cfg=None)
            for c in in_channels[::-1][:num_levels])
        self.level_embed = nn.Parameter(torch.empty(num_levels, D))
        self.positional_encoding = SinePositionalEncoding2D(D // 2, normalize=True)
        self.encoder = nn.ModuleList(
            DeformableEncoderLayer(D, num_heads, num_levels, num_points, feedforward_channels,
                                   dropout) for _ in range(num_encoder_layers))
        fpn = in_channels[:-num_levels]
        self.lateral_convs = nn.ModuleList(
            ConvModule(c, D, 1, bias=False, norm_cfg=norm_cfg, act_cfg=None) for c in fpn)
        self.output_convs = nn.ModuleList(
            ConvModule(D, D, 3, padding=1, bias=False, norm_cfg=norm_cfg) for _ in fpn)
        self.mask_feature = nn.Conv2d(D, out_channels, 1)
        self._reset_parameters()

    def _reset_parameters(self):
        """The paper code's init: Xavier-uniform projections and encoder matrices, the
        deformable attention's own (offsets on a ring), level embeddings N(0, 1)."""
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for m in self.encoder.modules():
            if isinstance(m, MultiScaleDeformableAttention):
                m.reset_parameters()
        for proj in self.input_proj:
            nn.init.xavier_uniform_(proj.conv.weight)
            nn.init.zeros_(proj.conv.bias)
        nn.init.normal_(self.level_embed)

    def encode(self, maps):
        """The encoder: the last ``num_levels`` maps -> memory, a list of [B, D, H_l, W_l],
        coarsest first."""
        levels = [proj(x) for proj, x in zip(self.input_proj, maps[::-1], strict=False)]
        B = levels[0].shape[0]
        masks = [x.new_zeros((B, *x.shape[-2:]), dtype=torch.bool) for x in levels]
        positions = [self.positional_encoding(m, position_dtype(x)).to(x.dtype)
                     for m, x in zip(masks, levels, strict=True)]
        src, _, pos, shapes = DeformableDetrTransformer.flatten_levels(
            levels, masks, positions, self.level_embed)
        refs = encoder_reference_points(shapes, src.new_ones(B, len(levels), 2))
        for layer in self.encoder:
            src = layer(src, pos, refs, shapes)
        memory = src.split([h * w for h, w in shapes], dim=1)
        return [m.transpose(1, 2).reshape(B, -1, h, w)
                for m, (h, w) in zip(memory, shapes, strict=True)]

    def forward(self, maps):
        """See the class docstring."""
        if len(maps) != len(self.in_channels):
            raise ValueError(f'MSDeformAttnPixelDecoder: got {len(maps)} maps, built for '
                             f'in_channels={self.in_channels}')
        memory = self.encode(maps)
        out = memory[-1]
        for i in reversed(range(len(self.lateral_convs))):
            lateral = self.lateral_convs[i](maps[i])
            up = F.interpolate(out, size=lateral.shape[-2:], mode='bilinear', align_corners=False)
            out = self.output_convs[i](lateral + up)
        return self.mask_feature(out), memory
