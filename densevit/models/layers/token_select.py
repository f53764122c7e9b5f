"""Keep a subset of a ViT's patch tokens together with their position information.

Masked image modelling (MAE) runs the encoder on the visible patches only. Each kept
patch must carry the position code of its place in the full grid, whatever the
position-embedding type: an absolute table's row, a relative bias's row and column, or
a rotary embedding's angles.
``keep`` [B, n] holds, per image, the grid indices (0..h*w-1, row-major) of the
patches kept; extra (class) tokens are never dropped and stay first.
"""
import torch


def gather_tokens(x, keep):
    """x [B, N, D], keep [B, n] long -> [B, n, D]: each image's kept rows, in ``keep`` order."""
    return torch.gather(x, 1, keep[..., None].expand(-1, -1, x.shape[-1]))


def _with_extra(keep, num_extra):
    """[B, E + n]: the extra tokens' rows 0..E-1, then the kept patches' rows shifted by E."""
    extra = torch.arange(num_extra, device=keep.device).expand(keep.shape[0], -1)
    return torch.cat([extra, keep + num_extra], dim=1)


def select_table(table, keep, num_extra):
    """An absolute position table [1, E + N, D] -> the rows of the kept tokens.

    Returns ``table`` itself when ``keep`` is None, else [B, E + n, D]: the E extra rows,
    then row ``E + keep[b, j]`` for each kept patch.
    """
    if keep is None:
        return table
    return gather_tokens(table.expand(keep.shape[0], -1, -1), _with_extra(keep, num_extra))


def select_bias(bias, keep, num_extra):
    """A relative position bias [1, heads, E + N, E + N] -> the kept tokens' pairs.

    Returns ``bias`` itself when ``keep`` is None, else [B, heads, E + n, E + n]: entry
    (q, k) is the full bias between the q-th and k-th kept tokens, i.e. the bias of their
    offset on the full grid.
    """
    if keep is None:
        return bias
    rows = _with_extra(keep, num_extra)  # [B, M]
    # the kept rows, then the kept columns: [B, heads, M, E + N] -> [B, heads, M, M]
    out = _gather_rows(bias, rows)
    index = rows[:, None, None, :].expand(-1, bias.shape[1], rows.shape[1], -1)
    return torch.gather(out, 3, index)


def _gather_rows(t, rows):
    """t [1 or B, H, R, C], rows [B, M] long -> [B, H, M, C]: each image's rows of dim 2."""
    index = rows[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1])
    return torch.gather(t.expand(rows.shape[0], -1, -1, -1), 2, index)


def select_rotation(rotation, keep, num_extra):
    """A RoPE :class:`~densevit.models.layers.rope_2d.Rotation` (cos / sin
    [1, 1 or heads, E + N, d/2]) -> the kept tokens' angles.

    Returns ``rotation`` itself when ``keep`` is None, else one with cos / sin
    [B, 1 or heads, E + n, d/2]: the E extra rows, then row ``E + keep[b, j]``.
    """
    if keep is None:
        return rotation
    rows = _with_extra(keep, num_extra)
    return rotation._replace(cos=_gather_rows(rotation.cos, rows),
                             sin=_gather_rows(rotation.sin, rows))
