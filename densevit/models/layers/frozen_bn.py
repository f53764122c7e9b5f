"""BatchNorm with frozen statistics and affine parameters (as in DETR's backbone)."""
import torch
from mmengine.registry import MODELS as MMENGINE_MODELS
from torch import nn


class FrozenBatchNorm2d(nn.Module):
    """y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, all fixed.

    Detection trains with 1-2 images per GPU, far too few for batch statistics;
    freezing the ImageNet statistics and the affine transform turns each BN
    into a fixed per-channel scale and shift. All four tensors are buffers
    (nothing to optimise), under BatchNorm2d's names, so torchvision / DETR
    checkpoints load unchanged; their ``num_batches_tracked`` is dropped.

    Registered for ``mmcv.cnn.build_norm_layer`` as ``norm_cfg=dict(type='FrozenBN')``.

    Args:
        num_features (int): channels C.
        eps (float): added to the variance (1e-5, as torchvision's BatchNorm).

    Shapes: [B, C, H, W] -> [B, C, H, W].
    """

    _abbr_ = 'bn'

    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.register_buffer('weight', torch.ones(num_features))
        self.register_buffer('bias', torch.zeros(num_features))
        self.register_buffer('running_mean', torch.zeros(num_features))
        self.register_buffer('running_var', torch.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.pop(prefix + 'num_batches_tracked', None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def scale_shift(self):
        """``(scale [C], shift [C])`` with ``y = x * scale + shift``."""
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        return scale, self.bias - self.running_mean * scale

    def forward(self, x):
        # one scale and shift per channel; after a convolution, conv_norm.py folds them
        # into the convolution instead
        scale, shift = self.scale_shift()
        return x * scale[None, :, None, None].to(x.dtype) + shift[None, :, None, None].to(x.dtype)

    def extra_repr(self):
        return f'{self.num_features}, eps={self.eps}'


# mmcv's build_norm_layer looks norm types up in mmengine's root MODELS registry;
# the guard lets this module be imported twice (e.g. by path and by package).
if 'FrozenBN' not in MMENGINE_MODELS.module_dict:
    MMENGINE_MODELS.register_module('FrozenBN', module=FrozenBatchNorm2d)
