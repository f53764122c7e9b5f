"""The fully convolutional head (Long et al. 2015, "Fully Convolutional Networks for Semantic
Segmentation"), as segmentation libraries use it: a few convolutions on one map, then a
per-pixel classifier; UperNet's and PSPNet's auxiliary head."""
import torch
from torch import nn

from densevit.registry import MODELS

from .decode_head import DecodeHead


@MODELS.register_module()
class FCNHead(DecodeHead):
    """``num_convs`` x (k x k conv-norm-act), optionally fused with its input, then classify.

    ``x = F (one map [B, C_in, h, w])``; ``y = convs(x)`` (the first conv C_in -> C =
    ``channels``, the others C -> C, all at the input's size); with ``concat_input``,
    ``y = conv_cat(concat(x, y))`` (k x k, C_in + C -> C); then dropout and the 1x1
    classifier. ``num_convs=0`` is a bare classifier on the input (``channels`` must
    equal ``in_channels``).

    Module names are MMSegmentation 1.x's ``FCNHead``'s (``convs.{i}``, ``conv_cat``,
    ``conv_seg``; ``ConvModule``'s ``conv`` / ``bn``), so its checkpoints load unrenamed.

    Args:
        num_convs (int): convolutions before the classifier (>= 0).
        kernel_size (int): k of every convolution; padding keeps the size.
        concat_input (bool): fuse the input with the convolutions' output (``conv_cat``).
        dilation (int): of the ``num_convs`` convolutions (not of ``conv_cat``).
        **kwargs: ``DecodeHead`` arguments (one input: ``in_index`` an int).

    Shapes:
        inputs[in_index]: [B, C_in, h, w] -> logits [B, K, h, w].
    """

    def __init__(self, num_convs=2, kernel_size=3, concat_input=True, dilation=1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(self.in_index, list):
            raise ValueError('FCNHead reads one map: give in_index as an int')
        if num_convs < 0 or dilation < 1:
            raise ValueError(f'FCNHead: num_convs must be >= 0 and dilation >= 1, got '
                             f'{num_convs} and {dilation}')
        if num_convs == 0 and self.channels != self.in_channels:
            raise ValueError(f'FCNHead with num_convs=0 classifies its input directly: '
                             f'channels ({self.channels}) must equal in_channels '
                             f'({self.in_channels})')
        padding = kernel_size // 2 * dilation
        # an empty Sequential passes its input through (num_convs=0)
        self.convs = nn.Sequential(*(
            self.conv_module(self.in_channels if i == 0 else self.channels, self.channels,
                             kernel_size, padding=padding, dilation=dilation)
            for i in range(num_convs)))
        self.conv_cat = (self.conv_module(self.in_channels + self.channels, self.channels,
                                          kernel_size, padding=kernel_size // 2)
                         if concat_input else None)

    def forward(self, inputs):
        """inputs[in_index] [B, C_in, h, w] -> logits [B, K, h, w]."""
        x = self._select_inputs(inputs)
        y = self.convs(x)
        if self.conv_cat is not None:
            y = self.conv_cat(torch.cat([x, y], dim=1))
        return self.cls_seg(y)
