"""Feature-to-pyramid neck of BEiT's semantic segmentation (Bao et al. 2022; its official
UperNet configs: the outputs of layers 4, 6, 8 and 12 of a ViT-B, upsampled 4x and 2x by
deconvolutions, kept, and downsampled 2x by max-pooling), MMSegmentation's
``Feature2Pyramid``.

A plain ViT gives stride-P maps at every layer; UperNet wants a pyramid of strides
P/4 .. 2P. This neck takes one map from each of several layers (usually four: the backbone's
``out_indices``, e.g. 3, 5, 7, 11 of a ViT-B) and rescales each by its own factor, keeping
the channels:

    4x  : deconv 2x2/2 -> norm -> GELU -> deconv 2x2/2
    2x  : deconv 2x2/2
    1x  : identity
    0.5x: max-pool 2x2/2
    0.25x: max-pool 4x4/4

Unlike ViTDet's :class:`~densevit.models.necks.simple_feature_pyramid.SimpleFeaturePyramid`
(every scale from the last map, channels reduced, convolutions after), map ``i`` goes
through the resampling of ``rescales[i]`` alone. The learned parts are named after their
factor (``upsample_4x.{0,1,3}``, ``upsample_2x.0``), MMSegmentation's names, so its
checkpoints' neck tensors load as they are.
"""
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

# each factor's module, by name; no two factors share one
_NAMES = {4: 'upsample_4x', 2: 'upsample_2x', 1: 'identity', 0.5: 'downsample_2x',
          0.25: 'downsample_4x'}


@MODELS.register_module()
class Feature2Pyramid(BaseModule):
    """One rescaled map per input map: a pyramid from several layers of a plain ViT.

    Args:
        embed_dims (int): channels C of every input map (and output map).
        rescales (Sequence[float]): the factor of each input map, in the inputs' order, each
            from {4, 2, 1, 0.5, 0.25} and none twice; BEiT's (4, 2, 1, 0.5).
        norm_cfg (dict): the norm between the two deconvolutions of the 4x branch; default
            ``dict(type='SyncBN', requires_grad=True)`` (BEiT's; plain BN on one process).
        in_stride (int): the stride of the input maps (16 for a ViT/16), for ``out_strides``.

    Attributes:
        out_channels (list[int]), out_strides (list[int | float]): one per output.

    Shapes:
        inputs: a sequence of ``len(rescales)`` maps [B, C, h, w] (the ViT's ``out_indices``
        outputs) -> a tuple of [B, C, h * s, w * s] for s in ``rescales`` (0.5x and 0.25x
        round down).
    """

    def __init__(self, embed_dims=768, rescales=(4, 2, 1, 0.5), norm_cfg=DEFAULT, in_stride=16,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        norm_cfg = resolve_default(norm_cfg, dict(type='SyncBN', requires_grad=True))
        self.rescales = tuple(rescales)
        unknown = [s for s in self.rescales if s not in _NAMES]
        if unknown or len(set(self.rescales)) != len(self.rescales):
            raise ValueError(f'Feature2Pyramid: rescales {list(rescales)} must be distinct '
                             f'factors from {list(_NAMES)}')
        C = embed_dims
        for scale in self.rescales:
            if scale == 4:
                module = nn.Sequential(nn.ConvTranspose2d(C, C, 2, stride=2),
                                       build_norm_layer(norm_cfg, C)[1], nn.GELU(),
                                       nn.ConvTranspose2d(C, C, 2, stride=2))
            elif scale == 2:
                module = nn.Sequential(nn.ConvTranspose2d(C, C, 2, stride=2))
            elif scale == 1:
                module = nn.Identity()
            else:
                k = int(1 / scale)
                module = nn.MaxPool2d(kernel_size=k, stride=k)
            self.add_module(_NAMES[scale], module)
        self.out_channels = [C] * len(self.rescales)
        strides = [in_stride / s for s in self.rescales]
        self.out_strides = [int(s) if float(s).is_integer() else s for s in strides]

    def forward(self, inputs):
        """See class docstring."""
        if len(inputs) != len(self.rescales):
            raise ValueError(f'Feature2Pyramid: {len(inputs)} input maps for '
                             f'{len(self.rescales)} rescales {list(self.rescales)}; give the '
                             f'backbone as many out_indices')
        return tuple(getattr(self, _NAMES[s])(x)
                     for s, x in zip(self.rescales, inputs, strict=True))
