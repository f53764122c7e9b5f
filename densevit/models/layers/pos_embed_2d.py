"""Two-dimensional absolute position embeddings: learned x/y halves, fixed sine-cosine.

Both describe a patch at (row r, column c) by one half-width code of its
column and one of its row, concatenated as ``[x-code(c), y-code(r)]``:

- ``learned_2d`` (ViT paper, App. D.4, "2-dimensional"): two learned tables,
  an X-embedding and a Y-embedding of width D/2 each.
- ``sincos_2d`` (MAE, He et al. 2022): the same layout with fixed codes,
  ``[sin(c*w_k), cos(c*w_k)]`` then ``[sin(r*w_k), cos(r*w_k)]`` over
  D/4 frequencies ``w_k = 1 / temperature^(k / (D/4))``. No parameters.

Same interface as :class:`~.pos_embed.LearnedPositionEmbedding`:
``table(hw) -> [1, E + h*w, D]``, ``forward(tokens, hw) -> tokens + table``.
"""
import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from torch import nn

from .pos_embed import same_grid


def resize_axis_table(table, length, mode='bicubic'):
    """Resize a per-axis table [n0, d] to [length, d] by 1D interpolation.

    The full learned_2d grid is constant along the other axis, so 2D
    interpolation of the grid equals 1D interpolation of each axis table;
    doing it per axis keeps the x/y structure exact and costs O(n*d).
    """
    if same_grid(table.shape[:1], (length,)):  # (symbolic under torch.export: resized)
        return table
    kwargs = {} if mode == 'nearest' else dict(align_corners=False)
    x = table.t()[None, :, None, :].float()  # [1, d, 1, n0]
    x = F.interpolate(x, size=(1, length), mode=mode, **kwargs)
    return x[0, :, 0].t().to(table.dtype)  # [length, d]


def _check_dims(embed_dims, multiple, name):
    if embed_dims % multiple != 0:
        raise ValueError(f'{name} needs embed_dims divisible by {multiple}, got {embed_dims}')


def _grid_of_halves(x_codes, y_codes):
    """x_codes [w, d], y_codes [h, d] -> [h*w, 2d], row-major, ``[x[c], y[r]]`` per patch."""
    h, w, d = y_codes.shape[0], x_codes.shape[0], x_codes.shape[1]
    grid = torch.cat([x_codes[None].expand(h, w, d), y_codes[:, None].expand(h, w, d)], dim=-1)
    return grid.reshape(h * w, 2 * d)


class Learned2DPositionEmbedding(nn.Module):
    """Learned 2D position embedding (config type ``learned_2d``).

    Args:
        num_patches_hw (tuple[int, int]): patch grid (h0, w0) of the tables.
        embed_dims (int): D (even).
        num_extra_tokens (int): E; extra (class) tokens are not on the grid and
            get one learned full-width row each, as in the 1D table.
        interpolate_mode (str): how an axis table is resized to a new grid.

    Parameters:
        x_embed: [w0, D/2], one row per column.
        y_embed: [h0, D/2], one row per row.
        extra_embed: [1, E, D] (absent when E = 0).
    """

    kind = 'absolute'

    def __init__(self, num_patches_hw, embed_dims, num_extra_tokens=1,
                 interpolate_mode='bicubic'):
        super().__init__()
        _check_dims(embed_dims, 2, 'learned_2d')
        self.num_patches_hw = tuple(num_patches_hw)
        self.num_extra_tokens = num_extra_tokens
        self.interpolate_mode = interpolate_mode
        h0, w0 = self.num_patches_hw
        self.x_embed = nn.Parameter(torch.zeros(w0, embed_dims // 2))
        self.y_embed = nn.Parameter(torch.zeros(h0, embed_dims // 2))
        self.extra_embed = (nn.Parameter(torch.zeros(1, num_extra_tokens, embed_dims))
                            if num_extra_tokens else None)

    def init_weights(self):
        for p in self.parameters():
            nn.init.trunc_normal_(p, std=.02)

    def table(self, hw):
        """[1, E + h*w, D] for grid ``hw`` = (h, w)."""
        h, w = hw
        grid = _grid_of_halves(resize_axis_table(self.x_embed, w, self.interpolate_mode),
                               resize_axis_table(self.y_embed, h, self.interpolate_mode))[None]
        return grid if self.extra_embed is None else torch.cat([self.extra_embed, grid], dim=1)

    def forward(self, tokens, hw):
        """tokens: [B, E + h*w, D] -> tokens + table, same shape."""
        return tokens + self.table(hw)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Each axis table knows its own length, so a checkpoint made for any
        # other grid (square or not) resizes on load.
        for name, length in (('x_embed', self.x_embed.shape[0]),
                             ('y_embed', self.y_embed.shape[0])):
            key = prefix + name
            t = state_dict.get(key)
            if t is not None and t.dim() == 2 and t.shape[0] != length \
                    and t.shape[1] == self.x_embed.shape[1]:
                print_log(f'Resizing {key} from {t.shape[0]} to {length} on load', logger='current')
                state_dict[key] = resize_axis_table(t, length, self.interpolate_mode)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def sincos_1d(positions, dims, temperature=10000.):
    """positions [n] -> [n, dims]: ``[sin(p*w_k) for k] + [cos(p*w_k) for k]``, k < dims/2."""
    k = torch.arange(dims // 2, dtype=torch.float32, device=positions.device)
    omega = 1.0 / temperature ** (k / (dims // 2))
    angles = positions.float()[:, None] * omega[None]  # [n, dims/2]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def sincos_2d_table(hw, embed_dims, temperature=10000., device=None):
    """Fixed 2D sine-cosine codes of a patch grid: [h*w, D], ``[x-code(c), y-code(r)]``.

    Positions are integer patch indices (0..w-1, 0..h-1), as in MAE, so the
    code of a patch does not change when the grid grows: a model run at a
    larger input sees new positions, not stretched ones.
    """
    _check_dims(embed_dims, 4, 'sincos_2d')
    h, w = hw
    x = sincos_1d(torch.arange(w, device=device), embed_dims // 2, temperature)
    y = sincos_1d(torch.arange(h, device=device), embed_dims // 2, temperature)
    return _grid_of_halves(x, y)


class SinCos2DPositionEmbedding(nn.Module):
    """Fixed 2D sine-cosine position embedding (config type ``sincos_2d``).

    Nothing to learn or resize: the table is computed for whatever grid comes
    in. Extra (class) tokens get zeros, as in MAE.

    Args:
        num_patches_hw (tuple[int, int]): grid whose table is precomputed.
        embed_dims (int): D (a multiple of 4: sin and cos for x and y).
        num_extra_tokens (int): E.
        temperature (float): wavelength base (10000).

    Buffers (not saved in checkpoints):
        weight: [1, E + h0*w0, D], the table for ``num_patches_hw``.
    """

    kind = 'absolute'

    def __init__(self, num_patches_hw, embed_dims, num_extra_tokens=1, temperature=10000.):
        super().__init__()
        self.num_patches_hw = tuple(num_patches_hw)
        self.embed_dims = embed_dims
        self.num_extra_tokens = num_extra_tokens
        self.temperature = temperature
        # A buffer so that the table follows .to(device / dtype) with the model.
        self.register_buffer('weight', self._compute(self.num_patches_hw, None), persistent=False)

    def _compute(self, hw, device):
        grid = sincos_2d_table(hw, self.embed_dims, self.temperature, device)
        extra = grid.new_zeros(self.num_extra_tokens, self.embed_dims)
        return torch.cat([extra, grid], dim=0)[None]

    def init_weights(self):
        pass  # fixed

    def table(self, hw):
        """[1, E + h*w, D] for grid ``hw``."""
        if same_grid(hw, self.num_patches_hw):  # (symbolic under torch.export: computed)
            return self.weight
        return self._compute(hw, self.weight.device).to(self.weight.dtype)

    def forward(self, tokens, hw):
        """tokens: [B, E + h*w, D] -> tokens + table, same shape."""
        return tokens + self.table(hw)

    def extra_repr(self):
        return (f'grid={self.num_patches_hw}, embed_dims={self.embed_dims}, '
                f'temperature={self.temperature}')
