"""A convolution followed by a norm that is a fixed affine map, run as one convolution.

A frozen BatchNorm (:class:`FrozenBatchNorm2d`, DETR's backbone) and a BatchNorm in eval
mode with running statistics compute ``y = x * s + t`` per channel, with ``s`` and ``t``
fixed. After a convolution ``W * x`` (no bias) that is the convolution with weight
``W * s`` (per output channel) and bias ``t``: one pass over the feature map instead of
three (convolution, multiply, add). The weights stay where they are (checkpoint keys do
not change); the scaled weight is formed on every call (a few MB for ResNet-50, against
activations of hundreds of MB), so training through it is exact as well: the gradient
reaches ``W`` through the product, and ``s`` / ``t`` are buffers.
"""
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .frozen_bn import FrozenBatchNorm2d


def affine_of(norm):
    """``(scale [C], shift [C])`` of a norm that is a fixed per-channel affine map in its
    current mode, else ``None`` (a BatchNorm that uses batch statistics, any other norm)."""
    if isinstance(norm, FrozenBatchNorm2d):
        return norm.scale_shift()
    if (isinstance(norm, _BatchNorm) and not norm.training
            and norm.running_mean is not None):
        scale = (norm.running_var + norm.eps).rsqrt()
        shift = -norm.running_mean * scale
        if norm.affine:
            scale, shift = scale * norm.weight, shift * norm.weight + norm.bias
        return scale, shift
    return None


def conv_norm(conv: nn.Conv2d, norm: nn.Module, x):
    """``norm(conv(x))``, folded into one convolution when ``norm`` is a fixed affine map.

    Shapes: x [B, Cin, H, W] -> [B, Cout, H', W'] (``conv``'s output).
    """
    affine = affine_of(norm)
    if affine is None or conv.bias is not None or conv.padding_mode != 'zeros':
        return norm(conv(x))
    scale, shift = affine
    weight = conv.weight * scale.to(conv.weight.dtype).view(-1, 1, 1, 1)
    return F.conv2d(x, weight, shift.to(conv.weight.dtype), conv.stride, conv.padding,
                    conv.dilation, conv.groups)
