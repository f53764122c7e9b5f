"""Simple feature pyramid (ViTDet, Li et al. 2022, Sec. 3 and Fig. 2).

A plain ViT has one stride-16 map; detectors want several scales. ViTDet
shows that building them from the last map alone, by deconvolution and
pooling (no top-down FPN, no use of earlier layers), is enough:

    4x  : deconv 2x2/2 -> norm -> GELU -> deconv 2x2/2   (channels C -> C/2 -> C/4)
    2x  : deconv 2x2/2                                    (C -> C/2)
    1x  : identity                                        (C)
    0.5x: max-pool 2x2/2                                  (C)
    0.25x: max-pool 4x4/4                                 (C; not in ViTDet: a stride-32 map
                                                           from a stride-8 ViT)

each followed by a 1x1 conv + norm and a 3x3 conv + norm to ``out_channels``.
"""
import torch
from mmcv.cnn import ConvModule, build_norm_layer
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers import layer_norm_2d  # noqa: F401  registers norm type 'LN2d'
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default


def _resample(scale, channels, norm_cfg):
    """Modules taking a C-channel map to ``scale`` times its size, and their out channels."""
    if scale == 4.0:
        mid = [build_norm_layer(norm_cfg, channels // 2)[1]] if norm_cfg else []
        layers = [nn.ConvTranspose2d(channels, channels // 2, 2, stride=2), *mid, nn.GELU(),
                  nn.ConvTranspose2d(channels // 2, channels // 4, 2, stride=2)]
        return nn.Sequential(*layers), channels // 4
    if scale == 2.0:
        deconv = nn.ConvTranspose2d(channels, channels // 2, 2, stride=2)
        return nn.Sequential(deconv), channels // 2
    if scale == 1.0:
        return nn.Identity(), channels
    if scale in (0.5, 0.25):
        k = int(1 / scale)
        return nn.MaxPool2d(kernel_size=k, stride=k), channels
    raise ValueError(f'SimpleFeaturePyramid: scale factor {scale} not supported; '
                     f'choose from 4.0, 2.0, 1.0, 0.5, 0.25')


@MODELS.register_module()
class SimpleFeaturePyramid(BaseModule):
    """Multi-scale maps from one backbone map.

    Args:
        in_channels (int): channels C of the map read (ViT-B: 768).
        out_channels (int): channels of every output (256).
        scale_factors (Sequence[float]): output scales relative to the input,
            from {4.0, 2.0, 1.0, 0.5, 0.25}; outputs come in this order.
        in_index (int): which backbone output to read (-1: the last).
        in_stride (int): stride of that map (16 for a /16 ViT), for ``out_strides``.
        norm_cfg (dict | None): norm after the convs and between the two 4x
            deconvs; default ``dict(type='LN2d', eps=1e-6)`` (channel LayerNorm) as
            ViTDet. None: no norm, convs get biases.

    Attributes:
        out_channels (list[int]), out_strides (list[int]): one per output.

    Shapes:
        inputs: tuple of maps, ``inputs[in_index]`` = [B, C, h, w] (a bare
        tensor is accepted) -> tuple of [B, out_channels, h*s, w*s], s in
        ``scale_factors`` (0.5x and 0.25x round down).
    """

    def __init__(self, in_channels=768, out_channels=256, scale_factors=(4.0, 2.0, 1.0, 0.5),
                 in_index=-1, in_stride=16, norm_cfg=DEFAULT, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        norm_cfg = resolve_default(norm_cfg, dict(type='LN2d', eps=1e-6))
        self.in_index = in_index
        self.scale_factors = tuple(float(s) for s in scale_factors)
        self.resample = nn.ModuleList()
        self.lateral_convs = nn.ModuleList()
        self.output_convs = nn.ModuleList()
        for s in self.scale_factors:
            resample, channels = _resample(s, in_channels, norm_cfg)
            self.resample.append(resample)
            self.lateral_convs.append(ConvModule(channels, out_channels, 1, norm_cfg=norm_cfg,
                                                 act_cfg=None))
            self.output_convs.append(ConvModule(out_channels, out_channels, 3, padding=1,
                                                norm_cfg=norm_cfg, act_cfg=None))
        self.out_channels = [out_channels] * len(self.scale_factors)
        strides = [in_stride / s for s in self.scale_factors]
        self.out_strides = [int(s) if float(s).is_integer() else s for s in strides]

    def init_weights(self):
        """Convolutions: uniform fan-in init with unit gain (ViTDet's "c2_xavier_fill"),
        zero biases; an ``init_cfg`` overrides."""
        if not self._is_init:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                    nn.init.kaiming_uniform_(m.weight, a=1)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
        super().init_weights()

    def forward(self, inputs):
        """See class docstring."""
        x = inputs if torch.is_tensor(inputs) else inputs[self.in_index]
        return tuple(out(lat(res(x))) for res, lat, out in
                     zip(self.resample, self.lateral_convs, self.output_convs, strict=True))
