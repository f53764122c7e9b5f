"""DETR's FPN-like mask decoder (Carion et al. 2020, Sec. 4.4 and Fig. 8: the "FPN-style CNN"
of the panoptic head; "MaskHeadSmallConv" in its code).

Per query, the projected backbone map and the query's attention maps are stacked and
convolved, then enlarged stage by stage: at each stage the map is resized (nearest) to the
next finer backbone map, added to that map's 1x1 projection and convolved again, the
channels halving each time. The last 3x3 convolution gives one mask logit per pixel.
"""
from collections import OrderedDict

import torch.nn.functional as F
from torch import nn


def conv_gn_relu(in_channels, out_channels, norm_groups):
    """3x3 convolution (with bias) -> GroupNorm(min(groups, C)) -> ReLU."""
    return nn.Sequential(OrderedDict(
        conv=nn.Conv2d(in_channels, out_channels, 3, padding=1),
        norm=nn.GroupNorm(min(norm_groups, out_channels), out_channels),
        act=nn.ReLU(inplace=True)))


class MaskFPNDecoder(nn.Module):
    """Mask logits of every query from its stacked input and the backbone's finer maps.

    Widths: the input's C, then C (first block), D/2 (second block), and D/4, D/8, ... after
    each of the ``len(fpn_channels)`` fusion stages (DETR with ResNet: three stages on the
    stride-16, 8 and 4 maps, D = 256: 264 -> 264 -> 128 -> 64 -> 32 -> 16 -> 1). With no
    stage the mask stays at the input's resolution.

    Args:
        in_channels (int): C, the stacked input's channels (DETR: D + attention heads).
        embed_dims (int): D, the transformer width that sets the stage widths (even, and
            D / 2^(n+1) >= 1 for n stages).
        fpn_channels (Sequence[int]): channels of the finer maps, coarsest first.
        norm_groups (int): GroupNorm groups, at most the channels (DETR: 8).

    Shapes:
        x [B·Q, C, h, w] (query-major within each image), fpn_feats list of [B, C_i, H_i, W_i]
        -> [B·Q, 1, H_n, W_n] (H_n the finest map's, or h without stages). With
        ``image_index`` [M] (the image of each row), x is [M, C, h, w]: any rows, any number
        per image (e.g. the matched queries only) -> [M, 1, H_n, W_n].
    """

    def __init__(self, in_channels, embed_dims, fpn_channels=(1024, 512, 256), norm_groups=8):
        super().__init__()
        n = len(fpn_channels)
        widths = [embed_dims // 2 ** (i + 1) for i in range(n + 1)]  # D/2, D/4, ...
        if widths[-1] < 1:
            raise ValueError(f'MaskFPNDecoder: embed_dims {embed_dims} is too small for {n} '
                             f'stages (width D / 2^{n + 1} < 1)')
        for c in (in_channels, *widths):
            if c % min(norm_groups, c):
                raise ValueError(f'MaskFPNDecoder: {c} channels do not split into '
                                 f'{min(norm_groups, c)} GroupNorm groups (the input has D + '
                                 f'heads = {in_channels}); choose sizes that do')
        self.stem = nn.Sequential(conv_gn_relu(in_channels, in_channels, norm_groups),
                                  conv_gn_relu(in_channels, widths[0], norm_groups))
        self.adapters = nn.ModuleList(nn.Conv2d(c, widths[i], 1)
                                      for i, c in enumerate(fpn_channels))
        self.fuse = nn.ModuleList(conv_gn_relu(widths[i], widths[i + 1], norm_groups)
                                  for i in range(n))
        self.out_conv = nn.Conv2d(widths[-1], 1, 3, padding=1)
        # DETR's initialisation: uniform fan-in (a=1), zero biases
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)

    def forward(self, x, fpn_feats, image_index=None):
        if len(fpn_feats) != len(self.adapters):
            raise ValueError(f'MaskFPNDecoder: {len(fpn_feats)} finer maps given, built for '
                             f'{len(self.adapters)}')
        x = self.stem(x)
        for adapter, fuse, feat in zip(self.adapters, self.fuse, fpn_feats, strict=True):
            lateral = adapter(feat)  # [B, C', H, W], once per image
            lateral = (lateral.repeat_interleave(x.shape[0] // lateral.shape[0], dim=0)
                       if image_index is None else lateral[image_index])
            x = fuse(lateral + F.interpolate(x, size=lateral.shape[-2:], mode='nearest'))
        return self.out_conv(x)
