"""SETR's multi-level feature aggregation neck (Zheng et al. 2021, "SETR", Sec. 3.3, MLA)."""
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmengine.model import BaseModule
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default


@MODELS.register_module()
class MLANeck(BaseModule):
    """Per level LayerNorm -> 1x1 conv; top-down cumulative sum; 3x3 conv.

    With inputs Z_1..Z_N (shallow to deep; SETR: ViT layers 6/12/18/24):
    ``P_i = conv1x1_i(LN_i(Z_i))``, then from the deepest level down
    ``S_N = P_N`` and ``S_i = P_i + S_{i+1}``, so every level also sees all
    deeper ones; the outputs are ``conv3x3_i(S_i)``. Plain-ViT levels share
    one resolution; if a deeper map is smaller (a pyramid backbone) it is
    upsampled bilinearly before the sum, as in an FPN.

    Paper configuration (ViT-L/16, ``out_indices=(5, 11, 17, 23)``,
    ``with_cls_token=False``, ``final_norm=False``)::

        dict(type='MLANeck', in_channels=[1024] * 4, out_channels=256,
             norm_cfg=dict(type='SyncBN'), act_cfg=dict(type='ReLU'))

    Args:
        in_channels (Sequence[int]): channels of each input level.
        out_channels (int): width of every output level.
        norm_layer (dict | None): token norm per level (LayerNorm over C); default
            ``dict(type='LN', eps=1e-6)``; None: no norm.
        norm_cfg (dict | None): norm of the 1x1 / 3x3 ConvModules.
        act_cfg (dict | None): activation of the ConvModules.
        init_cfg (dict, optional): mmengine init config.

    Attributes:
        out_channels (list[int]): ``[out_channels] * N``.

    Shapes:
        inputs: tuple of N [B, C_i, h_i, w_i] -> tuple of N [B, out_channels, h_i, w_i].
    """

    def __init__(self, in_channels=(1024, 1024, 1024, 1024), out_channels=256,
                 norm_layer=DEFAULT, norm_cfg=None, act_cfg=None, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        norm_layer = resolve_default(norm_layer, dict(type='LN', eps=1e-6))
        self.in_channels = list(in_channels)
        self.out_channels = [out_channels] * len(self.in_channels)
        self.norms = nn.ModuleList(
            build_norm_layer(norm_layer, c)[1] if norm_layer else nn.Identity()
            for c in self.in_channels)
        self.lateral_convs = nn.ModuleList(
            ConvModule(c, out_channels, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)
            for c in self.in_channels)
        self.out_convs = nn.ModuleList(
            ConvModule(out_channels, out_channels, 3, padding=1, norm_cfg=norm_cfg,
                       act_cfg=act_cfg)
            for _ in self.in_channels)

    @staticmethod
    def _token_norm(norm, x):
        """Apply ``norm`` over C of an NCHW map, one token (pixel) at a time."""
        B, C, h, w = x.shape
        return norm(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(B, C, h, w)

    def forward(self, inputs):
        """tuple of N NCHW maps -> tuple of N NCHW maps (see class docstring)."""
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'MLANeck expects {len(self.in_channels)} levels, '
                             f'got {len(inputs)}')
        laterals = [conv(self._token_norm(norm, x))
                    for x, norm, conv in zip(inputs, self.norms, self.lateral_convs, strict=True)]
        for i in range(len(laterals) - 2, -1, -1):  # top-down: S_i = P_i + S_{i+1}
            deeper = laterals[i + 1]
            if deeper.shape[-2:] != laterals[i].shape[-2:]:
                deeper = F.interpolate(deeper, size=laterals[i].shape[-2:], mode='bilinear',
                                       align_corners=False)
            laterals[i] = laterals[i] + deeper
        return tuple(conv(x) for conv, x in zip(self.out_convs, laterals, strict=True))
