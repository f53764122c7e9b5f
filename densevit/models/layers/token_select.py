"""Keep a subset of a ViT's patch tokens together with their position information.

Masked image modelling (MAE) runs the encoder on the visible patches only. Each kept
patch must carry the position code of its place in the full grid, whatever the
position-embedding type: an absolute table's row, or a relative bias's row and column.
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
    heads = bias.shape[1]
    # gather the kept rows, then the kept columns: [B, heads, M, E + N] -> [B, heads, M, M]
    index = rows[:, None, :, None].expand(-1, heads, -1, bias.shape[-1])
    out = torch.gather(bias.expand(keep.shape[0], -1, -1, -1), 2, index)
    index = rows[:, None, None, :].expand(-1, heads, rows.shape[1], -1)
    return torch.gather(out, 3, index)
