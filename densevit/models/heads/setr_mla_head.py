"""SETR's multi-level aggregation decoder head (Zheng et al. 2021, "SETR", Sec. 3.3, MLA)."""
import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from torch import nn

from densevit.registry import MODELS

from .decode_head import DecodeHead


@MODELS.register_module()
class SETRMLAHead(DecodeHead):
    """Per level two 3x3 conv-norm-act to ``mla_channels`` and x``up_scale``; concat; classify.

    Reads the ``MLANeck`` outputs (all at 1/16 for ViT-L/16), so the
    concatenation is at 1/4 and has ``mla_channels * N`` channels, which must
    equal ``channels`` (the classifier's input width).

    Paper configuration, after ``MLANeck(out_channels=256)``::

        dict(type='SETRMLAHead', in_channels=(256,) * 4, in_index=(0, 1, 2, 3),
             channels=512, mla_channels=128, up_scale=4, num_classes=150,
             dropout_ratio=0, norm_cfg=dict(type='SyncBN'), align_corners=False)
        # auxiliary: one classifier per MLA level, loss weight 0.4 (mmseg's
        # FCNHead(num_convs=0)), for i in 0..3:
        dict(type='SETRUPHead', in_channels=256, channels=256, in_index=i,
             num_classes=150, dropout_ratio=0, norm_layer=None, num_convs=0,
             loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))

    Args:
        mla_channels (int): width of each level's branch.
        up_scale (int): bilinear upsampling of each branch.
        **kwargs: ``DecodeHead`` arguments (``in_index`` a sequence).

    Shapes:
        N maps [B, C_i, h, w] -> logits [B, K, h * up_scale, w * up_scale].
    """

    def __init__(self, mla_channels=128, up_scale=4, **kwargs):
        kwargs.setdefault('in_index', [0, 1, 2, 3])
        super().__init__(**kwargs)
        if not isinstance(self.in_index, list):
            raise ValueError('SETRMLAHead reads several maps: give in_index and '
                             'in_channels as sequences')
        if self.channels != mla_channels * len(self.in_index):
            raise ValueError(f'SETRMLAHead: channels ({self.channels}) must be '
                             f'mla_channels * levels = {mla_channels * len(self.in_index)}')
        self.up_scale = up_scale
        self.branches = nn.ModuleList(
            nn.Sequential(
                ConvModule(c, mla_channels, 3, padding=1, norm_cfg=self.norm_cfg,
                           act_cfg=self.act_cfg),
                ConvModule(mla_channels, mla_channels, 3, padding=1, norm_cfg=self.norm_cfg,
                           act_cfg=self.act_cfg))
            for c in self.in_channels)

    def forward(self, inputs):
        """N NCHW maps -> logits (see class docstring)."""
        inputs = self._select_inputs(inputs)
        # SETR's levels share one size (x up_scale); a pyramid's deeper levels are brought
        # to the first level's upsampled size so any multi-scale backbone fits
        # (an int scale keeps the sizes symbolic for ONNX export: int() would fix them)
        up = self.up_scale
        size = [s * up if isinstance(up, int) else int(s * up) for s in inputs[0].shape[-2:]]
        outs = [F.interpolate(branch(x), size=size, mode='bilinear',
                              align_corners=self.align_corners)
                for branch, x in zip(self.branches, inputs, strict=True)]
        return self.cls_seg(torch.cat(outs, dim=1))
