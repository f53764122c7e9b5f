"""UperNet's decode head (Xiao et al. 2018, "Unified Perceptual Parsing for Scene
Understanding", Sec. 3.1): a feature pyramid (FPN) with PSPNet's pyramid pooling on top."""
import torch
from torch import nn

from densevit.models.layers.pyramid_pooling import PyramidPooling
from densevit.registry import MODELS

from .decode_head import DecodeHead, resize


@MODELS.register_module()
class UPerHead(DecodeHead):
    """Pyramid pooling on the deepest map, a top-down FPN, all levels fused at the finest.

    With N selected maps F_0 (finest, e.g. stride 4) .. F_{N-1} (deepest) and C =
    ``channels``:

    1. top: ``L_{N-1} = bottleneck(concat(F_{N-1}, PPM(F_{N-1})))``, the pyramid pooling
       module (``densevit/models/layers/pyramid_pooling.py``: one C-wide branch per pool
       scale) then a 3x3 conv-norm-act to C;
    2. laterals: ``L_i = lateral_convs[i](F_i)``, a 1x1 conv-norm-act to C, i < N-1;
    3. top-down: for i = N-1 .. 1, ``L_{i-1} += up(L_i)`` (bilinear to L_{i-1}'s size, the
       already-summed L_i);
    4. ``P_i = fpn_convs[i](L_i)`` (3x3 conv-norm-act) for i < N-1, ``P_{N-1} = L_{N-1}``;
    5. ``fpn_bottleneck(concat(P_0, up(P_1), .., up(P_{N-1})))``: every level resized to
       F_0's size, a 3x3 conv-norm-act from N*C to C; dropout and the 1x1 classifier.

    Module names are MMSegmentation 1.x's ``UPerHead``'s (``psp_modules``,
    ``bottleneck``, ``lateral_convs``, ``fpn_convs``, ``fpn_bottleneck``, ``conv_seg``;
    ``ConvModule``'s ``conv`` / ``bn``), so its checkpoints load unrenamed
    (``densevit/checkpoint/upernet.py``); the computation is the same, step for step
    (checked against mmseg 1.2.2 in ``tests/checkpoint/test_openmmlab_upernet.py``, and
    against HF's ``UperNetForSemanticSegmentation``, whose names are converted, in
    ``tests/models/test_upernet_vs_hf.py``).

    MMSegmentation's Swin-T configuration (``upernet_swin.py``; ``norm_cfg`` SyncBN)::

        dict(type='UPerHead', in_channels=[96, 192, 384, 768], in_index=[0, 1, 2, 3],
             pool_scales=(1, 2, 3, 6), channels=512, dropout_ratio=0.1,
             num_classes=150, align_corners=False)
        # auxiliary: FCN on stage 3, loss weight 0.4
        dict(type='FCNHead', in_channels=384, in_index=2, channels=256, num_convs=1,
             concat_input=False, dropout_ratio=0.1, num_classes=150,
             loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))

    Training needs more than one image per BatchNorm (``BN``: per process; ``SyncBN``: over
    all processes): the 1-bin pooling branch normalises one value per image and channel.

    Args:
        pool_scales (Sequence[int]): the pyramid pooling's bins per side.
        **kwargs: ``DecodeHead`` arguments; ``in_index`` and ``in_channels`` are
            sequences, finest map first.

    Shapes:
        inputs[in_index[i]]: [B, C_i, H_i, W_i] -> logits [B, K, H_0, W_0].
    """

    def __init__(self, pool_scales=(1, 2, 3, 6), **kwargs):
        kwargs.setdefault('in_index', [0, 1, 2, 3])
        super().__init__(**kwargs)
        if not isinstance(self.in_index, list):
            raise ValueError('UPerHead reads several maps: give in_index and in_channels as '
                             'sequences, finest first')
        *lower, top = self.in_channels
        c = self.channels
        self.psp_modules = PyramidPooling(pool_scales, top, c, self.norm_cfg, self.act_cfg,
                                          self.align_corners)
        self.bottleneck = self.conv_module(top + len(pool_scales) * c, c, 3, padding=1)
        self.lateral_convs = nn.ModuleList(self.conv_module(ci, c, 1) for ci in lower)
        self.fpn_convs = nn.ModuleList(self.conv_module(c, c, 3, padding=1) for _ in lower)
        self.fpn_bottleneck = self.conv_module(len(self.in_channels) * c, c, 3, padding=1)

    def psp_forward(self, x):
        """The deepest map [B, C_top, h, w] -> [B, C, h, w] (step 1)."""
        return self.bottleneck(torch.cat([x, *self.psp_modules(x)], dim=1))

    def forward(self, inputs):
        """tuple of NCHW maps -> logits [B, K, H_0, W_0] (see class docstring)."""
        feats = self._select_inputs(inputs)
        laterals = [conv(x) for conv, x in zip(self.lateral_convs, feats[:-1], strict=True)]
        laterals.append(self.psp_forward(feats[-1]))
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + resize(
                laterals[i], laterals[i - 1].shape[-2:], align_corners=self.align_corners)
        outs = [conv(x) for conv, x in zip(self.fpn_convs, laterals[:-1], strict=True)]
        outs.append(laterals[-1])
        size = outs[0].shape[-2:]
        outs = [outs[0]] + [resize(x, size, align_corners=self.align_corners) for x in outs[1:]]
        return self.cls_seg(self.fpn_bottleneck(torch.cat(outs, dim=1)))
