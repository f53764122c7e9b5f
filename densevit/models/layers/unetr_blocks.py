"""The convolutional blocks of UNETR's decoder (Hatamizadeh et al. 2022, "UNETR:
Transformers for 3D Medical Image Segmentation", Sec. 3.2 and Fig. 2), in 2-D.

Every convolution here is bias-free (the norm after it has the offset) and every
upsampling is a 2x2 transposed convolution of stride 2, as in MONAI's ``UNETR``, whose
weights these blocks take one for one (``densevit/checkpoint/monai_unetr.py``).
"""
import torch
from mmcv.cnn import ConvModule, build_activation_layer
from torch import nn


def up2x(in_channels, out_channels):
    """2x2 transposed convolution, stride 2, no bias: [B, C_in, H, W] -> [B, C_out, 2H, 2W]."""
    return nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2, bias=False)


class ConvPair(nn.Module):
    """Two 3x3 conv-norm-act layers, residual or not (the paper's "3x3 conv, BN, ReLU" pairs;
    the residual form is nnU-Net's block, MONAI's ``UnetResBlock``).

    Plain: ``act(norm(conv2(act(norm(conv1(x))))))``. Residual: the second activation comes
    after adding the shortcut, ``act(norm(conv2(...)) + s(x))``, where ``s`` is the identity
    when the width does not change and a 1x1 conv + norm otherwise.

    Args:
        in_channels, out_channels (int): C_in, C_out.
        norm_cfg, act_cfg (dict | None): mmcv configs of every norm and activation.
        residual (bool): the residual form.

    Shapes: [B, C_in, H, W] -> [B, C_out, H, W].
    """

    def __init__(self, in_channels, out_channels, norm_cfg, act_cfg, residual=True):
        super().__init__()
        self.conv1 = ConvModule(in_channels, out_channels, 3, padding=1, bias=False,
                                norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv2 = ConvModule(out_channels, out_channels, 3, padding=1, bias=False,
                                norm_cfg=norm_cfg, act_cfg=None if residual else act_cfg)
        self.residual = residual
        self.shortcut = None
        if residual and in_channels != out_channels:
            self.shortcut = ConvModule(in_channels, out_channels, 1, bias=False,
                                       norm_cfg=norm_cfg, act_cfg=None)
        self.act = build_activation_layer(act_cfg) if residual and act_cfg else nn.Identity()

    def forward(self, x):
        out = self.conv2(self.conv1(x))
        if not self.residual:
            return out
        return self.act(out + (x if self.shortcut is None else self.shortcut(x)))


class ProjectionUpsample(nn.Module):
    """A hidden state's map brought to a finer resolution, x2 per step (the paper's blue
    "deconv, conv, BN, ReLU" path from z3, z6, z9 to the decoder; MONAI's
    ``UnetrPrUpBlock``).

    ``up`` (transposed conv to ``out_channels``), then ``num_up - 1`` times a transposed conv
    followed (``conv_block``) by a :class:`ConvPair`: each of ``blocks`` is
    ``Sequential(transposed conv[, ConvPair])``.

    Shapes: [B, C_in, h, w] -> [B, C_out, h * 2**num_up, w * 2**num_up].
    """

    def __init__(self, in_channels, out_channels, num_up, norm_cfg, act_cfg, conv_block=True,
                 residual=True):
        super().__init__()
        self.up = up2x(in_channels, out_channels)
        self.blocks = nn.ModuleList(
            nn.Sequential(up2x(out_channels, out_channels),
                          *([ConvPair(out_channels, out_channels, norm_cfg, act_cfg, residual)]
                            if conv_block else []))
            for _ in range(num_up - 1))

    def forward(self, x):
        x = self.up(x)
        for block in self.blocks:
            x = block(x)
        return x


class UpsampleFuse(nn.Module):
    """One decoder step (the paper's green "deconv" then yellow "conv, BN, ReLU" pair; MONAI's
    ``UnetrUpBlock``): the coarser map goes up x2 to the skip's width, is concatenated
    with the skip (upsampled map first) and a :class:`ConvPair` fuses them.

    Shapes: x [B, C_in, h, w], skip [B, C_out, 2h, 2w] -> [B, C_out, 2h, 2w].
    """

    def __init__(self, in_channels, out_channels, norm_cfg, act_cfg, residual=True):
        super().__init__()
        self.up = up2x(in_channels, out_channels)
        self.block = ConvPair(2 * out_channels, out_channels, norm_cfg, act_cfg, residual)

    def forward(self, x, skip):
        return self.block(torch.cat([self.up(x), skip], dim=1))
