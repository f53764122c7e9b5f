"""Patch embedding: the ViT stem that turns an image into a sequence of tokens."""
import torch
from mmcv.cnn import build_norm_layer
from torch import nn
from torch.nn.modules.utils import _pair


class PatchEmbed(nn.Module):
    """Split an image into patches and project each to ``embed_dims``.

    A PxP convolution with stride P is the same as flattening non-overlapping
    PxP patches and applying one shared Linear (Dosovitskiy et al., Eq. 1).

    Args:
        in_channels (int): image channels C.
        embed_dims (int): token width D.
        patch_size (int | tuple[int, int]): patch (kernel) size P.
        stride (int | tuple[int, int], optional): defaults to ``patch_size``
            (non-overlapping patches).
        padding (int | tuple[int, int]): zero padding of the convolution.
        norm_cfg (dict, optional): e.g. ``dict(type='LN')``, applied to tokens.

    Shapes:
        x: [B, C, H, W] -> tokens [B, h*w, D] and the patch grid (h, w).
    """

    def __init__(self, in_channels, embed_dims, patch_size, stride=None, padding=0,
                 norm_cfg=None):
        super().__init__()
        self.patch_size = _pair(patch_size)
        self.stride = _pair(stride if stride is not None else patch_size)
        self.padding = _pair(padding)
        self.proj = nn.Conv2d(in_channels, embed_dims, kernel_size=self.patch_size,
                              stride=self.stride, padding=self.padding)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1] if norm_cfg else None

    def output_hw(self, input_hw):
        """Patch grid (h, w) for an image of size ``input_hw`` = (H, W).

        Raises ValueError when the convolution would silently drop the last
        rows/columns: the detection data preprocessor pads images to a
        multiple of the patch size, so a remainder means a misconfiguration.
        """
        out = []
        for size, k, s, p in zip(input_hw, self.patch_size, self.stride, self.padding,
                                 strict=True):
            span = size + 2 * p - k
            if span < 0 or span % s != 0:
                raise ValueError(
                    f'PatchEmbed: input of spatial size {tuple(input_hw)} does not tile '
                    f'into patches of size {self.patch_size} with stride {self.stride} '
                    f'and padding {self.padding}; pad H and W to a multiple of the '
                    f'patch size (e.g. pad_size_divisor={self.patch_size[0]} in the '
                    f'data preprocessor).')
            out.append(span // s + 1)
        return tuple(out)

    def forward(self, x: torch.Tensor):
        """x: [B, C, H, W] -> (tokens [B, h*w, D], (h, w))."""
        hw = self.output_hw(x.shape[-2:])
        x = self.proj(x).flatten(2).transpose(1, 2)  # [B, D, h, w] -> [B, h*w, D]
        if self.norm is not None:
            x = self.norm(x)
        return x, hw
