"""SETR's Naive and progressive-upsampling (PUP) decoders (Zheng et al. 2021, "SETR", Sec. 3.3)."""
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .decode_head import DecodeHead


@MODELS.register_module()
class SETRUPHead(DecodeHead):
    """LayerNorm on tokens, then ``num_convs`` x (conv-norm-act, xup_scale bilinear), classifier.

    The ViT's last layer is not normalised (pre-norm blocks), so the head
    starts with a LayerNorm over channels, applied per token (the NCHW map
    flattened to [B, h*w, C]). Each stage then convolves and upsamples; the
    loss resizes the logits to the label size, so Naive's total x16 comes
    from x4 here and x4 there, PUP's from x2 four times.

    Paper decoders on ViT-L/16 (backbone ``out_indices=(9, 14, 19, 23)``,
    i.e. layers 10/15/20/24, ``final_norm=False``; ``norm_cfg`` SyncBN)::

        # SETR-Naive: LN -> 1x1 conv-BN-ReLU -> x4 -> classifier
        dict(type='SETRUPHead', in_channels=1024, channels=256, in_index=3,
             num_classes=150, dropout_ratio=0, num_convs=1, up_scale=4, kernel_size=1)
        # SETR-PUP: LN -> 4 x (3x3 conv-BN-ReLU -> x2) -> classifier
        dict(type='SETRUPHead', in_channels=1024, channels=256, in_index=3,
             num_classes=150, dropout_ratio=0, num_convs=4, up_scale=2, kernel_size=3)
        # auxiliary heads on layers 10, 15, 20 (in_index 0, 1, 2), loss weight 0.4;
        # mmseg's ADE20K configs use num_convs=2 (kernel 1 for Naive, 3 for PUP):
        dict(type='SETRUPHead', in_channels=1024, channels=256, in_index=0,
             num_classes=150, dropout_ratio=0, num_convs=2, up_scale=4, kernel_size=1,
             loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))

    With ``norm_layer=None, num_convs=0`` (and ``channels == in_channels``) it
    is a bare dropout + 1x1 classifier: the per-level auxiliary head of
    SETR-MLA (mmseg's ``FCNHead(num_convs=0)``) on the 256-wide MLA maps.

    Args:
        norm_layer (dict | None): token norm on the input; default
            ``dict(type='LN', eps=1e-6)``; None skips it.
        num_convs (int): conv + upsample stages (0: classifier only).
        up_scale (int): bilinear upsampling factor after each conv (1: none).
        kernel_size (int): 1 (Naive) or 3 (PUP); padding keeps the size.
        init_cfg: default LayerNorm to identity, ``conv_seg`` ~ N(0, 0.01).
        **kwargs: ``DecodeHead`` arguments (one input: ``in_index`` an int).

    Shapes:
        inputs[in_index]: [B, C, h, w] -> logits [B, K, h * up_scale**num_convs, w * ...].
    """

    def __init__(self, norm_layer=DEFAULT, num_convs=1, up_scale=4, kernel_size=1,
                 init_cfg=None, **kwargs):
        norm_layer = resolve_default(norm_layer, dict(type='LN', eps=1e-6))
        if init_cfg is None:
            init_cfg = [dict(type='Constant', val=1.0, bias=0, layer='LayerNorm'),
                        dict(type='Normal', std=0.01, override=dict(name='conv_seg'))]
        super().__init__(init_cfg=init_cfg, **kwargs)
        if isinstance(self.in_index, list):
            raise ValueError('SETRUPHead reads one map: give in_index as an int')
        if num_convs == 0 and self.channels != self.in_channels:
            raise ValueError(f'SETRUPHead with num_convs=0 classifies its input directly: '
                             f'channels ({self.channels}) must equal in_channels '
                             f'({self.in_channels})')
        self.up_scale = up_scale
        self.norm = build_norm_layer(norm_layer, self.in_channels)[1] if norm_layer else None
        self.up_convs = nn.ModuleList(
            ConvModule(self.in_channels if i == 0 else self.channels, self.channels,
                       kernel_size, padding=kernel_size // 2,
                       norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)
            for i in range(num_convs))

    def forward(self, inputs):
        """inputs[in_index] [B, C, h, w] -> logits (see class docstring)."""
        x = self._select_inputs(inputs)
        if self.norm is not None:
            B, C, h, w = x.shape
            x = self.norm(x.flatten(2).transpose(1, 2))  # LN over C per token
            x = x.transpose(1, 2).reshape(B, C, h, w)
        for conv in self.up_convs:
            x = conv(x)
            if self.up_scale != 1:
                x = F.interpolate(x, scale_factor=self.up_scale, mode='bilinear',
                                  align_corners=self.align_corners)
        return self.cls_seg(x)
