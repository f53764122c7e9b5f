"""UNETR's decoder (Hatamizadeh et al. 2022, "UNETR: Transformers for 3D Medical Image
Segmentation", Sec. 3.2, Fig. 2), 2-D: four ViT hidden states and the image itself."""
from collections.abc import Sequence

from torch import nn

from densevit.models.layers.unetr_blocks import ConvPair, ProjectionUpsample, UpsampleFuse
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .decode_head import DecodeHead

# the four hidden states, after the image at index 0 of the segmentor's feature tuple
HIDDEN_STATES = 4
# the stride of the ViT's patch grid: the decoder doubles it away in four steps
PATCH_STRIDE = 2 ** HIDDEN_STATES


@MODELS.register_module()
class UNETRHead(DecodeHead):
    """UNETR's decoder on a ViT with 16-pixel patches.

    It reads the tuple that the :class:`~densevit.models.segmentors.unetr.UNETR` segmentor
    builds: the image, then the four hidden states (the paper's z3, z6, z9, z12) as maps of
    the ViT's patch grid, the last one after the final LayerNorm. With F = ``channels``::

        image [B, C, H, W]     -> image_encoder (ConvPair)            -> e0 [B, F, H, W]
        z_a  [B, D, H/16, ...] -> skip_encoders.0 (x8)                -> e1 [B, 2F, H/2, ...]
        z_b                    -> skip_encoders.1 (x4)                -> e2 [B, 4F, H/4, ...]
        z_c                    -> skip_encoders.2 (x2)                -> e3 [B, 8F, H/8, ...]
        z_L -> decoders.0 (+ e3) -> [B, 8F, H/8] -> decoders.1 (+ e2) -> [B, 4F, H/4]
            -> decoders.2 (+ e1) -> [B, 2F, H/2] -> decoders.3 (+ e0) -> [B, F, H, W]
            -> conv_seg (1x1, bias) -> logits [B, K, H, W]

    (:mod:`densevit.models.layers.unetr_blocks` has the blocks.) MONAI's
    ``UNETR(spatial_dims=2)`` with ``feature_size=F`` is this head with the defaults, on a
    ViT with ``out_indices=(3, 6, 9, 11)`` (MONAI takes ``hidden_states_out[3]``,
    ``[6]``, ``[9]``: the outputs of the 4th, 7th and 10th of its 12 blocks, not normed)
    and the final norm on the last; ``tests/models/test_unetr_vs_monai.py``.

    Args:
        in_channels (int | Sequence[int]): the ViT's width D (four equal entries, one per
            hidden state, when a sequence).
        channels (int): F, MONAI's ``feature_size`` (default 16, MONAI's).
        image_channels (int): C of the image (3).
        res_block (bool): residual conv pairs (MONAI's default) or plain ones.
        conv_block (bool): conv pairs after the transposed convs of the hidden states' paths
            (MONAI's default) or transposed convs alone.
        dropout_ratio (float): dropout before the classifier; 0 (MONAI has none).
        norm_cfg (dict | None): default ``dict(type='IN')``: instance norm without affine
            parameters, MONAI's ``norm_name='instance'``.
        act_cfg (dict | None): default ``dict(type='LeakyReLU', negative_slope=0.01)``.
        **kwargs: the other ``DecodeHead`` arguments (``num_classes``, ``loss_decode`` ...);
            not ``in_index``: the head reads the image and the four hidden states.

    Shapes:
        forward((image [B, C, H, W], 4 x [B, D, H/16, W/16])) -> [B, K, H, W].
    """

    def __init__(self, in_channels, channels=16, image_channels=3, res_block=True,
                 conv_block=True, dropout_ratio=0., norm_cfg=DEFAULT, act_cfg=DEFAULT,
                 **kwargs):
        if isinstance(in_channels, Sequence):
            if len(in_channels) != HIDDEN_STATES or len(set(in_channels)) != 1:
                raise ValueError(f'UNETRHead reads {HIDDEN_STATES} hidden states of one ViT '
                                 f'(one width D); got in_channels={list(in_channels)}')
            in_channels = in_channels[0]
        norm_cfg = resolve_default(norm_cfg, dict(type='IN'))
        act_cfg = resolve_default(act_cfg, dict(type='LeakyReLU', negative_slope=0.01))
        super().__init__(in_channels=[in_channels] * HIDDEN_STATES, channels=channels,
                         in_index=list(range(1, HIDDEN_STATES + 1)),
                         dropout_ratio=dropout_ratio, norm_cfg=norm_cfg, act_cfg=act_cfg,
                         **kwargs)
        D, F = in_channels, channels
        blocks = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.image_encoder = ConvPair(image_channels, F, residual=res_block, **blocks)
        # hidden state s (1..3) -> width F * 2**s at stride 2**s: up by 2**(4 - s)
        self.skip_encoders = nn.ModuleList(
            ProjectionUpsample(D, F * 2 ** s, HIDDEN_STATES - s, conv_block=conv_block,
                               residual=res_block, **blocks)
            for s in range(1, HIDDEN_STATES))
        # widths 8F (from D), 4F, 2F, F: each joins the skip of its width
        widths = [D] + [F * 2 ** s for s in range(HIDDEN_STATES - 1, -1, -1)]
        self.decoders = nn.ModuleList(UpsampleFuse(c_in, c_out, residual=res_block, **blocks)
                                      for c_in, c_out in zip(widths, widths[1:], strict=False))

    def forward(self, inputs):
        """(image, z_a, z_b, z_c, z_L) -> logits [B, K, H, W] (see class docstring)."""
        image = inputs[0]
        *hidden, last = self._select_inputs(inputs)
        covered = tuple(PATCH_STRIDE * s for s in last.shape[-2:])
        if tuple(image.shape[-2:]) != covered:
            raise ValueError(f'UNETRHead: the image is {tuple(image.shape[-2:])} but the ViT '
                             f'grid {tuple(last.shape[-2:])} covers {covered}: pad images to a '
                             f'multiple of {PATCH_STRIDE} (SegDataPreprocessor size_divisor)')
        skips = [self.image_encoder(image)] + [
            encoder(z) for encoder, z in zip(self.skip_encoders, hidden, strict=True)]
        x = last
        for decoder, skip in zip(self.decoders, reversed(skips), strict=True):
            x = decoder(x, skip)
        return self.cls_seg(x)
