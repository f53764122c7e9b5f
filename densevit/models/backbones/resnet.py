"""ResNet backbone (He et al. 2016) with torchvision's parameter names.

``conv1, bn1, layer1.0.conv1, ..., layer4.2.bn3, layerK.0.downsample.{0,1}``:
torchvision and DETR checkpoints load with no renaming (their ``fc`` head is
dropped on load). Used by DETR-R50/R101 (FrozenBN, stem + layer1 frozen) and
as the CNN stem of the hybrid ViT.
"""
from collections.abc import Sequence

import torch
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from densevit.checkpoint.pretrained import loads_pretrained
from densevit.checkpoint.resnet import convert_resnet
from densevit.models.layers import frozen_bn  # noqa: F401  registers norm type 'FrozenBN'
from densevit.models.layers.conv_norm import conv_norm
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .freeze import freeze


def _norm(norm_cfg, channels):
    return build_norm_layer(norm_cfg, channels)[1]


def _downsample(downsample, x):
    """The shortcut's 1x1 convolution and norm (``downsample.0``, ``.1``)."""
    return conv_norm(downsample[0], downsample[1], x)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18/34). Shapes: [B, Cin, H, W] -> [B, planes, H/s, W/s].

    ``norm_cfg`` default: ``dict(type='BN')`` (:class:`ResNet` passes its own).
    """

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None,
                 norm_cfg=DEFAULT, style='pytorch'):
        super().__init__()
        norm_cfg = resolve_default(norm_cfg, dict(type='BN'))
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, padding=dilation, dilation=dilation,
                               bias=False)
        self.bn1 = _norm(norm_cfg, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, padding=dilation, dilation=dilation,
                               bias=False)
        self.bn2 = _norm(norm_cfg, planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else _downsample(self.downsample, x)
        out = conv_norm(self.conv1, self.bn1, x).relu_()
        out = conv_norm(self.conv2, self.bn2, out)
        return out.add_(identity).relu_()


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 -> 1x1 expand (x4) (ResNet-50/101/152).

    ``style='pytorch'`` strides the 3x3 convolution (torchvision, DETR, "ResNet
    v1.5"); ``'caffe'`` strides the first 1x1 (the original paper).
    ``norm_cfg`` default: ``dict(type='BN')`` (:class:`ResNet` passes its own).
    Shapes: [B, Cin, H, W] -> [B, 4*planes, H/s, W/s].
    """

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None,
                 norm_cfg=DEFAULT, style='pytorch'):
        super().__init__()
        norm_cfg = resolve_default(norm_cfg, dict(type='BN'))
        s1, s3 = (1, stride) if style == 'pytorch' else (stride, 1)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, s1, bias=False)
        self.bn1 = _norm(norm_cfg, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, s3, padding=dilation, dilation=dilation,
                               bias=False)
        self.bn2 = _norm(norm_cfg, planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = _norm(norm_cfg, planes * self.expansion)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else _downsample(self.downsample, x)
        out = conv_norm(self.conv1, self.bn1, x).relu_()
        out = conv_norm(self.conv2, self.bn2, out).relu_()
        out = conv_norm(self.conv3, self.bn3, out)
        return out.add_(identity).relu_()


@MODELS.register_module()
class ResNet(BaseModule):
    """ResNet without its classifier: stem (7x7/2 conv, 3x3/2 max-pool) + 4 stages.

    Args:
        depth (int): 18, 34, 50, 101 or 152.
        in_channels (int): image channels.
        base_channels (int): stem width; stage i has ``base * 2^i`` planes.
        out_indices (Sequence[int]): stages to return (0-3). Stages after the
            last one returned are not built (nothing unused for DDP to trip
            on); their checkpoint weights are skipped on load.
        strides (Sequence[int]): stride of each stage's first block.
        dilations (Sequence[int]): dilation of each stage. As in torchvision,
            a stage's first block keeps the previous stage's dilation, so DC5
            (``strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2)``) equals
            torchvision's ``replace_stride_with_dilation=[False, False, True]``.
        frozen_stages (int): -1 trains all; 0 freezes the stem; k freezes the
            stem and stages 1..k (DETR: 1). Frozen parts stay in eval mode.
        norm_cfg (dict): default ``dict(type='FrozenBN')`` (detection), or
            ``dict(type='BN')`` ...
        norm_eval (bool): keep BatchNorm layers in eval mode while training
            (use running statistics, do not update them).
        style (str): 'pytorch' or 'caffe' (where a bottleneck strides).
        stage_blocks (Sequence[int], optional): blocks per stage instead of the
            depth's (the depth then only picks the block type); for small test
            models and converted checkpoints of non-standard depth.
        channels_last (bool): keep the convolution weights and run the stages in the
            channels-last memory layout (default True: on CPU oneDNN's convolutions are
            faster there, see docs/benchmarks.md). The stage maps returned are contiguous
            either way, and checkpoint keys and values do not depend on it.
        init_cfg (dict, optional): e.g. ``dict(type='Pretrained', checkpoint=...)``
            (torchvision, DETR or HF layout).

    Shapes:
        x [B, C, H, W] -> tuple of [B, out_channels[i], H/out_strides[i], W/...]
        (sizes rounded up for inputs not divisible by the stride).

    A convolution followed by a frozen norm (FrozenBN, or BN in eval mode) runs as one
    convolution (``layers/conv_norm.py``): the same outputs within float rounding.
    """

    arch_settings = {
        18: (BasicBlock, (2, 2, 2, 2)),
        34: (BasicBlock, (3, 4, 6, 3)),
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }

    def __init__(self, depth=50, in_channels=3, base_channels=64, out_indices=(3,),
                 strides=(1, 2, 2, 2), dilations=(1, 1, 1, 1), frozen_stages=-1,
                 norm_cfg=DEFAULT, norm_eval=False, style='pytorch',
                 stage_blocks=None, channels_last=True, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        norm_cfg = resolve_default(norm_cfg, dict(type='FrozenBN'))
        if depth not in self.arch_settings:
            raise KeyError(f'Unsupported ResNet depth {depth}; choose from '
                           f'{sorted(self.arch_settings)}')
        if style not in ('pytorch', 'caffe'):
            raise ValueError(f"style must be 'pytorch' or 'caffe', got {style!r}")
        if len(strides) != 4 or len(dilations) != 4:
            raise ValueError('strides and dilations need one entry per stage (4)')
        if isinstance(out_indices, int):
            out_indices = (out_indices,)
        if not isinstance(out_indices, Sequence) or not all(0 <= i < 4 for i in out_indices):
            raise IndexError(f'out_indices must be stages in 0..3, got {out_indices!r}')
        if not -1 <= frozen_stages <= 4:
            raise ValueError('frozen_stages must be in [-1, 4]')
        block, default_blocks = self.arch_settings[depth]
        stage_blocks = tuple(stage_blocks or default_blocks)
        if len(stage_blocks) != 4:
            raise ValueError(f'stage_blocks needs 4 entries, got {stage_blocks!r}')
        self.depth, self.out_indices = depth, tuple(out_indices)
        self.frozen_stages, self.norm_eval = frozen_stages, norm_eval

        self.conv1 = nn.Conv2d(in_channels, base_channels, 7, 2, padding=3, bias=False)
        self.bn1 = _norm(norm_cfg, base_channels)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

        inplanes, stride_so_far, prev_dilation = base_channels, 4, 1
        channels, stage_strides = [], []
        self.num_stages = max(self.out_indices) + 1
        for i, num_blocks in enumerate(stage_blocks[:self.num_stages]):
            planes = base_channels * 2 ** i
            layer = self._make_stage(block, inplanes, planes, num_blocks, strides[i],
                                     dilations[i], prev_dilation, norm_cfg, style)
            self.add_module(f'layer{i + 1}', layer)
            inplanes, prev_dilation = planes * block.expansion, dilations[i]
            stride_so_far *= strides[i]
            channels.append(inplanes)
            stage_strides.append(stride_so_far)
        self.out_channels = [channels[i] for i in self.out_indices]
        self.out_strides = [stage_strides[i] for i in self.out_indices]
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)
        self._freeze_stages()

    @staticmethod
    def _make_stage(block, inplanes, planes, num_blocks, stride, dilation, first_dilation,
                    norm_cfg, style):
        downsample = None
        if stride != 1 or inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * block.expansion, 1, stride, bias=False),
                _norm(norm_cfg, planes * block.expansion))
        layers = [block(inplanes, planes, stride, first_dilation, downsample, norm_cfg, style)]
        inplanes = planes * block.expansion
        layers += [block(inplanes, planes, 1, dilation, None, norm_cfg, style)
                   for _ in range(1, num_blocks)]
        return nn.Sequential(*layers)

    def _frozen_modules(self):
        """The stem (``conv1``, ``bn1``) and ``layer1`` .. ``layer{frozen_stages}``."""
        if self.frozen_stages < 0:
            return []
        return [self.conv1, self.bn1] + [getattr(self, f'layer{i}')
                                         for i in range(1, self.frozen_stages + 1)]

    def _freeze_stages(self):
        freeze(self._frozen_modules())

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    @loads_pretrained(convert_resnet)
    def init_weights(self):
        """He (fan-out) init for convolutions, BatchNorm to identity; an ``init_cfg``
        Pretrained checkpoint (torchvision / DETR / HF layout; for a whole DETR
        checkpoint add ``prefix='backbone.0.body.'``) is loaded afterwards, with
        missing keys reported."""
        if not self._is_init:
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                elif isinstance(m, _BatchNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
        super().init_weights()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # ImageNet checkpoints carry the 1000-way classifier, and stages this
        # backbone does not build; dropping them here lets them load with strict=True.
        skipped = tuple(f'{prefix}layer{i + 1}.' for i in range(self.num_stages, 4))
        for key in list(state_dict):
            if key in (prefix + 'fc.weight', prefix + 'fc.bias') or key.startswith(skipped):
                state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x):
        """x [B, C, H, W] -> tuple of stage maps (see class docstring)."""
        x = x.contiguous(memory_format=self.memory_format)
        x = self.maxpool(conv_norm(self.conv1, self.bn1, x).relu_())
        feats = {}
        for i in range(self.num_stages):
            x = getattr(self, f'layer{i + 1}')(x)
            feats[i] = x
        return tuple(feats[i].contiguous() for i in self.out_indices)
