"""Pyramid pooling (Zhao et al. 2017, "Pyramid Scene Parsing Network", Sec. 3.2): the
context branch of PSPNet, which UperNet puts on its deepest map."""
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from torch import nn


class PyramidPooling(nn.ModuleList):
    """Per scale s: average-pool the map into s x s bins, 1x1 conv-norm-act, upsample back.

    A bin count s pools the map into an s x s grid of (overlapping where H or W is not a
    multiple of s) averages (``AdaptiveAvgPool2d``: bin i spans rows
    floor(i H / s) .. ceil((i + 1) H / s)); s = 1 is the global average, larger s keep
    coarse layout. Each pooled grid goes through its own 1x1 ``ConvModule`` to
    ``channels`` and is resized bilinearly to the input's H x W. The caller concatenates
    the input with these maps (PSPNet's and UperNet's bottleneck).

    Held as one ``Sequential(AdaptiveAvgPool2d(s), ConvModule)`` per scale, so its
    tensors are ``{i}.1.conv.weight`` and ``{i}.1.bn.*``: MMSegmentation's ``PPM``
    names, and its checkpoints load unrenamed.

    Args:
        pool_scales (Sequence[int]): bin counts per side, e.g. (1, 2, 3, 6) (the paper's).
        in_channels (int): C of the input map.
        channels (int): output width of each branch.
        norm_cfg, act_cfg (dict | None): of each branch's ``ConvModule``.
        align_corners (bool): of the bilinear upsampling.

    Shapes:
        forward(x [B, C, H, W]) -> list of ``len(pool_scales)`` maps [B, channels, H, W].
    """

    def __init__(self, pool_scales, in_channels, channels, norm_cfg, act_cfg,
                 align_corners=False):
        super().__init__(
            nn.Sequential(nn.AdaptiveAvgPool2d(s),
                          ConvModule(in_channels, channels, 1, norm_cfg=norm_cfg,
                                     act_cfg=act_cfg))
            for s in pool_scales)
        self.pool_scales = tuple(pool_scales)
        self.align_corners = align_corners

    def forward(self, x):
        size = x.shape[-2:]
        return [F.interpolate(branch(x), size=size, mode='bilinear',
                              align_corners=self.align_corners) for branch in self]
