"""Fixed 2D sine-cosine position encoding of DETR (Carion et al. 2020, App. A.4)."""
import math

import torch
from torch import nn


class SinePositionalEncoding2D(nn.Module):
    """Sine/cosine of normalized (y, x) pixel positions that skips padding.

    Positions are the cumulative count of non-padded pixels along each axis, so
    padding does not shift the encoding of real pixels; with ``normalize`` they are
    divided by the last count (+``eps``) and scaled to [0, ``scale``].

    Args:
        num_feats (int): features per axis; the output has ``2 * num_feats`` channels
            (y features then x features).
        temperature (float): wavelength base.
    """

    def __init__(self, num_feats=128, temperature=10000, normalize=True, scale=2 * math.pi,
                 eps=1e-6, offset=0.0):
        super().__init__()
        self.num_feats = num_feats
        self.temperature = temperature
        self.normalize = normalize
        self.scale = scale
        self.eps = eps
        self.offset = offset

    def forward(self, mask, dtype=torch.float32):
        """mask [B, H, W] bool (True = padding) -> encoding [B, 2 * num_feats, H, W], computed
        in ``dtype`` (float32; a float64 model's comparisons ask for float64)."""
        not_mask = (~mask).to(dtype)
        y = not_mask.cumsum(1)
        x = not_mask.cumsum(2)
        if self.normalize:
            y = (y + self.offset) / (y[:, -1:, :] + self.eps) * self.scale
            x = (x + self.offset) / (x[:, :, -1:] + self.eps) * self.scale
        dim_t = torch.arange(self.num_feats, dtype=dtype, device=mask.device)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode='floor') / self.num_feats)
        pos_x = x[..., None] / dim_t
        pos_y = y[..., None] / dim_t
        # interleave: even channels sin, odd channels cos
        pos_x = torch.stack([pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()], dim=4).flatten(3)
        pos_y = torch.stack([pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()], dim=4).flatten(3)
        return torch.cat([pos_y, pos_x], dim=3).permute(0, 3, 1, 2)

    def extra_repr(self):
        return f'num_feats={self.num_feats}, temperature={self.temperature}, normalize={self.normalize}'
