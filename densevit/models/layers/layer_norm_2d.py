"""LayerNorm over the channels of an NCHW feature map (ViTDet's ``LN`` in conv necks)."""
import torch.nn.functional as F
from mmengine.registry import MODELS as MMENGINE_MODELS
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """Normalise each pixel's C channels: [B, C, H, W] -> [B, C, H, W].

    ``nn.LayerNorm`` normalises the last dimension, so the map is moved to
    channels-last and back; the parameters (``weight``, ``bias`` of size C)
    are LayerNorm's. Registered for ``build_norm_layer`` as ``dict(type='LN2d')``.

    Args:
        num_channels (int): C.
        eps (float): 1e-6, as ViTDet.
    """

    _abbr_ = 'ln'

    def __init__(self, num_channels, eps=1e-6, elementwise_affine=True):
        super().__init__(num_channels, eps=eps, elementwise_affine=elementwise_affine)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


# build_norm_layer searches mmengine's root MODELS (see frozen_bn.py).
if 'LN2d' not in MMENGINE_MODELS.module_dict:
    MMENGINE_MODELS.register_module('LN2d', module=LayerNorm2d)
