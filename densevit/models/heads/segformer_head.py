"""SegFormer's all-MLP decoder (Xie et al. 2021, "SegFormer", Sec. 3.2, Eq. 4)."""
import torch
from mmcv.cnn import ConvModule
from torch import nn

from densevit.registry import MODELS

from .decode_head import DecodeHead, resize


@MODELS.register_module()
class SegformerHead(DecodeHead):
    """All-MLP head: unify widths, upsample to 1/4, concatenate, fuse, classify.

    For each of the N selected maps F_i [B, C_i, H_i, W_i]:
    ``F_i' = P_i(F_i)`` (C_i -> C per pixel), upsampled (bilinear) to the first
    map's size (stride 4); then ``F = ConvNormAct_1x1(concat(F_N', ..., F_1'))``,
    dropout and the 1x1 classifier.

    ``proj_type`` chooses P_i:

    - ``'linear'`` (the paper, the official NVlabs and HF models): a per-pixel
      Linear with bias, no norm or activation (held as a 1x1 conv:
      ``linear_projs.{i}.weight`` [C, C_i, 1, 1], ``.bias``).
    - ``'conv_norm_act'`` (MMSegmentation 1.x's ``SegformerHead``, its zoo
      checkpoints): a 1x1 conv + ``norm_cfg`` + ``act_cfg`` ``ConvModule``
      (``linear_projs.{i}.conv`` / ``.bn``).

    Checkpoints of either origin load with ``densevit.checkpoint.mit`` (tests in
    ``tests/models/test_mit.py`` and ``tests/checkpoint/test_openmmlab_segformer.py``);
    a checkpoint of the other form is refused when loaded (its per-level keys are
    not this head's). The concatenation runs deepest map first, like the official
    code; the converter reorders MMSegmentation's fuse weights (shallowest first).

    Paper configuration (``channels`` = C = 256 for B0/B1, 768 for B2-B5; the
    MMSegmentation zoo uses 256 for all)::

        dict(type='SegformerHead', in_channels=[32, 64, 160, 256],  # MiT-B0
             in_index=[0, 1, 2, 3], channels=256, num_classes=150,
             dropout_ratio=0.1, norm_cfg=dict(type='SyncBN'), align_corners=False)

    Args:
        interpolate_mode (str): how projected maps are upsampled.
        proj_type (str): ``'linear'`` or ``'conv_norm_act'`` (see above).
        **kwargs: ``DecodeHead`` arguments; ``in_index`` and ``in_channels``
            must be sequences (stride-4 map first).

    Shapes:
        inputs[in_index[i]]: [B, C_i, H_i, W_i] -> logits [B, K, H_0, W_0].
    """

    def __init__(self, interpolate_mode='bilinear', proj_type='linear', **kwargs):
        kwargs.setdefault('in_index', [0, 1, 2, 3])
        super().__init__(**kwargs)
        if not isinstance(self.in_index, list):
            raise ValueError('SegformerHead reads several maps: give in_index and '
                             'in_channels as sequences')
        self.interpolate_mode = interpolate_mode
        if proj_type == 'linear':
            projs = (nn.Conv2d(c, self.channels, kernel_size=1) for c in self.in_channels)
        elif proj_type == 'conv_norm_act':
            projs = (ConvModule(c, self.channels, kernel_size=1, norm_cfg=self.norm_cfg,
                                act_cfg=self.act_cfg) for c in self.in_channels)
        else:
            raise ValueError(f"SegformerHead: proj_type must be 'linear' or 'conv_norm_act', "
                             f'got {proj_type!r}')
        self.proj_type = proj_type
        self.linear_projs = nn.ModuleList(projs)
        self.fuse = ConvModule(self.channels * len(self.in_channels), self.channels,
                               kernel_size=1, norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)

    def forward(self, inputs):
        """tuple of NCHW maps -> logits [B, K, H_0, W_0] (see class docstring).

        Computed in an equivalent, cheaper order: the 1x1 fuse conv over the
        concatenation is a sum over maps of its per-map column block W_i, and a
        per-pixel linear map commutes with (bilinear) upsampling, so each map is
        projected by W_i (after P_i; ``'linear'``: by the product W_i P_i) at its own
        resolution, upsampled and summed. The [B, N*C, H_0, W_0] concatenation is
        never built. Same function (checked against the concatenating form in
        tests/models/test_seg_heads.py), with fewer operations: W_i acts at each
        map's own size, and no N*C-channel conv runs at the largest size.
        """
        feats = self._select_inputs(inputs)
        size = feats[0].shape[-2:]
        fuse_w = self.fuse.conv.weight.flatten(1)  # [C, N*C], deepest map's block first
        n, c = len(feats), self.channels
        x = None
        for i, (proj, feat) in enumerate(zip(self.linear_projs, feats, strict=True)):
            block = fuse_w[:, (n - 1 - i) * c:(n - i) * c]  # [C, C]
            if self.proj_type == 'linear':
                weight = block @ proj.weight.flatten(1)  # [C, C_i]
                bias = block @ proj.bias  # [C]
                B, _, h, w = feat.shape
                y = torch.matmul(weight, feat.flatten(2)) + bias[:, None]  # [B, C, h*w]
            else:
                feat = proj(feat)  # [B, C, h, w]
                B, _, h, w = feat.shape
                y = torch.matmul(block, feat.flatten(2))  # [B, C, h*w]
            y = resize(y.view(B, c, h, w), size, self.interpolate_mode, self.align_corners)
            x = y if x is None else x + y
        if self.fuse.conv.bias is not None:
            x = x + self.fuse.conv.bias.view(1, -1, 1, 1)
        if self.fuse.with_norm:
            x = self.fuse.norm(x)
        if self.fuse.with_activation:
            x = self.fuse.activate(x)
        return self.cls_seg(x)
