"""EoMT's upscaling of the ViT's patch-token map for its mask prediction (Kerssies et al.
2025, Sec. 3.2: "Mask prediction"), after ViTDet's simple feature pyramid (Li et al. 2022)."""
from torch import nn

from .layer_norm_2d import LayerNorm2d


class UpscaleBlock(nn.Module):
    """One 2x upscaling: a 2x2 transposed convolution with stride 2, GELU, a 3x3 depthwise
    convolution (no bias) and a LayerNorm over the channels.

    Args:
        channels (int): D, kept throughout.
        norm_eps (float): the LayerNorm's epsilon (1e-6).

    Shapes: [B, D, h, w] -> [B, D, 2h, 2w].
    """

    def __init__(self, channels, norm_eps=1e-6):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels, kernel_size=2, stride=2)
        self.act = nn.GELU()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels,
                              bias=False)
        self.norm = LayerNorm2d(channels, eps=norm_eps)

    def forward(self, x):
        return self.norm(self.conv(self.act(self.up(x))))


def official_num_upscale_blocks(patch_size):
    """EoMT's number of 2x upscalings for patches of ``patch_size`` pixels: ``log2(P) - 2``
    rounded down, at least 1 (P = 16: 2, so masks at 1/4 of the image; P = 14: 1, at 2/7; P = 8: 1),
    as the official code sets it."""
    return max(1, patch_size.bit_length() - 1 - 2)
