"""Two-dimensional rotary position embedding (RoPE) of a ViT's queries and keys.

RoPE (Su et al. 2021, "RoFormer") encodes where a token is by rotating pairs of
channels of its query and key by angles proportional to its position; the logit
``q_m . k_n`` then depends on the two positions only through their offset. In a
ViT the position is 2D: for a patch at coordinates (y, x) channel pair p of a
head of width d turns by

    angle_p = y * f_y[p] + x * f_x[p]            (p = 0 .. d/2 - 1)

Axial RoPE gives half of the pairs to each axis: f_y[p] = f_k for the first d/4
pairs, f_x[p] = f_k for the last d/4, zero otherwise, with ``f_k = s *
theta^(-4k/d)``, k = 0 .. d/4 - 1. Conventions (option ``convention``):

- ``'eva02'`` (EVA-02, Fang et al. 2023): integer patch-grid coordinates rescaled
  to the pre-training grid ``pt_grid`` (row i of an h-row input sits at
  ``i * h0 / h``), theta 1e4, s = 1; pair p is channels (2p, 2p + 1)
  (interleaved).
- ``'dinov3'`` (DINOv3, Simeoni et al. 2025): patch centres normalised to
  [-1, 1] (``(i + 0.5) * 2 / h - 1``), theta 100, s = 2 pi; pair p is channels
  (p, p + d/2) (the two halves, "rotate half"). In training it may shift each
  axis by U(-shift, shift), then scale each axis by a log-uniform factor in
  [1/jitter, jitter] and both by one in [1/rescale, rescale] (off by default).

RoPE-Mixed (Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer", option ``mixed=True``) learns f_x and f_y for every pair of every
head (and layer), initialised with the axial magnitudes ``theta^(-4k/d)``
(theta 10) along a random direction per head: pair k < d/4 points at angle a,
pair d/4 + k at a + pi/2. The convention still chooses coordinates and pairing;
``'eva02'`` at the pre-training grid is the paper's (integer coordinates,
interleaved pairs).

Extra (class) tokens have no grid place and are not rotated (cos 1, sin 0).
"""
import math
from typing import NamedTuple

import torch
from torch import nn

#: convention -> (patch coordinates, default theta, frequency scale s, interleaved pairs)
CONVENTIONS = {
    'eva02': ('grid', 1e4, 1.0, True),
    'dinov3': ('centres', 100.0, 2 * math.pi, False),
}
MIXED_THETA = 10.0  # Heo et al. 2024's RoPE-Mixed


class Rotation(NamedTuple):
    """The rotation of one attention layer's queries and keys.

    ``cos`` / ``sin``: [1 or B, 1 or heads, N, d/2], one angle per channel pair of
    each of the N tokens; ``interleaved``: pair p is channels (2p, 2p + 1), else
    (p, p + d/2).
    """

    cos: torch.Tensor
    sin: torch.Tensor
    interleaved: bool

    def apply(self, x):
        """x [B, heads, N, d] -> x with every channel pair (a, b) of token n turned to
        (a cos - b sin, a sin + b cos); same shape and dtype."""
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        if self.interleaved:
            a, b = x.unflatten(-1, (-1, 2)).unbind(-1)
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def _magnitudes(head_dims, theta, scale):
    """The d/4 axial frequencies ``scale * theta^(-4k/d)`` as Python floats (constants
    in an exported graph)."""
    return [scale * theta ** (-4 * k / head_dims) for k in range(head_dims // 4)]


def axial_frequencies(head_dims, theta, scale=1.0, device=None, dtype=torch.float32):
    """[1, 2, d/2]: f_y (row 0) in the first d/4 pairs, f_x (row 1) in the last d/4."""
    mags = _magnitudes(head_dims, theta, scale)
    zeros = [0.0] * len(mags)
    return torch.tensor([[mags + zeros, zeros + mags]], device=device, dtype=dtype)


def mixed_frequencies(head_dims, num_heads, theta=MIXED_THETA, scale=1.0):
    """RoPE-Mixed's initial frequencies [heads, 2, d/2] (rows f_y, f_x): per head one
    direction a ~ U(0, 2 pi); pair k < d/4 has (f_x, f_y) = m_k (cos a, sin a), pair
    d/4 + k the same turned by pi/2."""
    mags = torch.tensor(_magnitudes(head_dims, theta, scale))
    a = torch.rand(num_heads, 1) * (2 * math.pi)
    a = torch.cat([a.expand(-1, len(mags)), a.expand(-1, len(mags)) + math.pi / 2], dim=1)
    mags = mags.repeat(2)
    return torch.stack([mags * a.sin(), mags * a.cos()], dim=1)


def patch_coordinates(hw, kind, pt_grid=None, device=None, dtype=torch.float32):
    """[h*w, 2] (y, x) of every patch of an h x w grid, row-major.

    ``kind``: ``'grid'``, integer indices rescaled to ``pt_grid`` (h0, w0) (EVA-02);
    ``'centres'``, patch centres in [-1, 1] (DINOv3).
    """
    h, w = hw
    ys = torch.arange(h, device=device, dtype=dtype)
    xs = torch.arange(w, device=device, dtype=dtype)
    if kind == 'centres':
        ys, xs = (ys + 0.5) * (2 / h) - 1, (xs + 0.5) * (2 / w) - 1
    else:
        ys, xs = ys * (pt_grid[0] / h), xs * (pt_grid[1] / w)
    return torch.stack([ys[:, None].expand(h, w), xs[None, :].expand(h, w)], dim=-1).reshape(-1, 2)


def augment_coordinates(coords, shift=None, jitter=None, rescale=None):
    """DINOv3's training-time coordinate noise, one draw per call: coords [N, 2] + a
    shift per axis in U(-shift, shift), times a factor per axis log-uniform in
    [1/jitter, jitter], times one factor log-uniform in [1/rescale, rescale]."""
    def log_uniform(n, limit):
        bound = math.log(limit)
        return torch.empty(n, device=coords.device, dtype=coords.dtype).uniform_(
            -bound, bound).exp()
    if shift:
        coords = coords + torch.empty(2, device=coords.device, dtype=coords.dtype).uniform_(
            -shift, shift)
    if jitter:
        coords = coords * log_uniform(2, jitter)
    if rescale:
        coords = coords * log_uniform(1, rescale)
    return coords


class RotaryPositionEmbedding2D(nn.Module):
    """2D RoPE of one attention layer (config type ``rope``); see the module docstring.

    Args:
        num_patches_hw (tuple[int, int]): pre-training grid (h0, w0) (``'eva02'``
            rescales coordinates to it).
        embed_dims (int): token width D.
        num_heads (int): heads h; the head width d = D / h must be divisible by 4.
        num_extra_tokens (int): E tokens before the grid (class token), not rotated.
        convention (str): ``'eva02'`` or ``'dinov3'``.
        mixed (bool): RoPE-Mixed's learned per-head frequencies.
        theta (float, optional): frequency base; default 1e4 (eva02), 100 (dinov3),
            10 (mixed).
        shift, jitter, rescale (float, optional): DINOv3's coordinate augmentations,
            drawn at every call in training mode only; None: off.

    Parameters:
        freqs: [heads, 2, d/2] (rows f_y, f_x), only when ``mixed``.

    Shapes:
        ``rotation(hw, like)`` -> :class:`Rotation` with cos / sin
        [1, 1 or heads, E + h*w, d/2].
    """

    kind = 'rotary'

    def __init__(self, num_patches_hw, embed_dims, num_heads, num_extra_tokens=0,
                 convention='eva02', mixed=False, theta=None, shift=None, jitter=None,
                 rescale=None):
        super().__init__()
        if convention not in CONVENTIONS:
            raise ValueError(f'Unknown RoPE convention {convention!r}; valid conventions: '
                             f'{", ".join(CONVENTIONS)}')
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by '
                             f'num_heads ({num_heads})')
        head_dims = embed_dims // num_heads
        if head_dims % 4 != 0:
            raise ValueError(f'RoPE needs a head dimension divisible by 4 (a pair of '
                             f'channels per frequency, half of the pairs per axis), got '
                             f'{head_dims} (embed_dims {embed_dims} / num_heads {num_heads})')
        for name, value, low in (('shift', shift, 0), ('jitter', jitter, 1),
                                 ('rescale', rescale, 1)):
            if value is not None and value < low:
                raise ValueError(f'RoPE {name} must be at least {low}, got {value}')
        if mixed and (shift or jitter or rescale):
            raise ValueError('RoPE coordinate augmentations (shift / jitter / rescale) are '
                             'not offered with mixed=True: each layer has its own RoPE-Mixed '
                             'module and would draw its own noise')
        self.coords_kind, default_theta, self.scale, self.interleaved = CONVENTIONS[convention]
        self.convention = convention
        self.num_patches_hw = tuple(num_patches_hw)
        self.head_dims = head_dims
        self.num_heads = num_heads
        self.num_extra_tokens = num_extra_tokens
        self.theta = theta if theta is not None else MIXED_THETA if mixed else default_theta
        self.augment = dict(shift=shift, jitter=jitter, rescale=rescale)
        # A fixed rotation is the same at every layer: the ViT builds one and computes it
        # once per forward (DINOv3's augmentations are then drawn once per forward).
        self.layer_independent = not mixed
        self.freqs = nn.Parameter(torch.empty(num_heads, 2, head_dims // 2)) if mixed else None
        self.init_weights()

    def init_weights(self):
        if self.freqs is not None:
            with torch.no_grad():
                self.freqs.copy_(mixed_frequencies(self.head_dims, self.num_heads, self.theta,
                                                   self.scale))

    def frequencies(self, device=None, dtype=torch.float32):
        """[1 or heads, 2, d/2]: f_y (row 0) and f_x (row 1) of every channel pair."""
        if self.freqs is not None:
            return self.freqs.to(dtype)
        return axial_frequencies(self.head_dims, self.theta, self.scale, device, dtype)

    def coordinates(self, hw, device=None, dtype=torch.float32):
        """[h*w, 2] (y, x) of the grid ``hw``, augmented in training when asked."""
        coords = patch_coordinates(hw, self.coords_kind, self.num_patches_hw, device, dtype)
        if self.training and any(self.augment.values()):
            coords = augment_coordinates(coords, **self.augment)
        return coords

    def rotation(self, hw, like=None):
        """The :class:`Rotation` of grid ``hw`` = (h, w) for the E + h*w tokens; angles in
        float32 or ``like``'s dtype if wider, on ``like``'s device."""
        dtype = torch.float32 if like is None else torch.promote_types(like.dtype,
                                                                       torch.float32)
        device = None if like is None else like.device
        coords = self.coordinates(hw, device, dtype)  # [h*w, 2]
        freqs = self.frequencies(device, dtype)  # [1 or heads, 2, d/2]
        # y * f_y + x * f_x, elementwise: a matmul would run in bf16 under autocast
        angles = coords[:, 0, None] * freqs[:, None, 0] + coords[:, 1, None] * freqs[:, None, 1]
        cos, sin = angles.cos(), angles.sin()  # [1 or heads, h*w, d/2]
        if self.num_extra_tokens:
            extra = (cos.shape[0], self.num_extra_tokens, cos.shape[2])
            cos = torch.cat([cos.new_ones(extra), cos], dim=1)
            sin = torch.cat([sin.new_zeros(extra), sin], dim=1)
        return Rotation(cos[None], sin[None], self.interleaved)

    def forward(self, hw, like=None):
        return self.rotation(hw, like)

    def extra_repr(self):
        return (f'convention={self.convention!r}, mixed={self.freqs is not None}, '
                f'theta={self.theta}, grid={self.num_patches_hw}, '
                f'num_extra_tokens={self.num_extra_tokens}')
