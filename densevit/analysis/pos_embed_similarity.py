"""Position-embedding similarity (ViT paper, Fig. 7 centre and Fig. 10).

For absolute tables (learned 1D / 2D, sine-cosine) tile (i, j) of the figure
is the cosine similarity of patch (i, j)'s embedding to every patch's.
A relative position bias has no per-patch vector; its natural counterpart is
the bias itself: tile (i, j) is the bias a query at (i, j) adds to the logit
of every key, averaged over heads (per-head values are in the numbers file).
Extra (class) tokens are left out: they have no grid position.
"""
import torch
import torch.nn.functional as F
from torch import nn


def cosine_similarity_grid(table, hw):
    """table [h*w, D] (raster order) -> [h, w, h, w]: cos(table[(i,j)], table[(k,l)])."""
    h, w = hw
    t = F.normalize(table.float(), dim=-1)
    return (t @ t.t()).reshape(h, w, h, w)


def relative_bias_grid(bias, hw, num_extra_tokens=0):
    """bias [1 or heads.., heads, E+N, E+N] -> [heads, h, w, h, w], query (i, j) to key (k, l)."""
    h, w = hw
    b = bias.reshape(-1, *bias.shape[-2:])[:, num_extra_tokens:, num_extra_tokens:]
    return b.float().reshape(-1, h, w, h, w)


def position_embedding_modules(vit):
    """[(name, module)] of a ViT's position embeddings: one, or one per layer."""
    pe = getattr(vit, 'pos_embed', None)
    if pe is None:
        raise ValueError('this model has no position embedding (type none): nothing to plot')
    if getattr(vit, 'pos_embed_kind', None) == 'rotary':
        raise ValueError('this model has a rotary position embedding (type rope): it rotates '
                         'queries and keys and has no table or bias to plot')
    if isinstance(pe, nn.ModuleList):
        return [(f'layer{i}', m) for i, m in enumerate(pe)]
    placement = getattr(vit, 'pos_embed_placement', 'stem')
    return [('shared' if placement == 'every_layer_shared' else placement, pe)]


@torch.no_grad()
def position_similarity(vit, hw=None):
    """Similarity grids of every position embedding of a ViT backbone.

    Args:
        vit: a ``VisionTransformer`` (or anything with ``pos_embed``).
        hw (tuple[int, int], optional): grid; default, the one the table was made for.

    Returns:
        list of dict(name, kind, hw, grid): ``grid`` [h, w, h, w] (cosine
        similarity, or head-mean relative bias), ``per_head`` [heads, h, w, h, w]
        for a relative bias.
    """
    out = []
    for name, pe in position_embedding_modules(vit):
        grid_hw = tuple(hw or pe.num_patches_hw)
        E = pe.num_extra_tokens
        if getattr(pe, 'kind', 'absolute') == 'relative':
            per_head = relative_bias_grid(pe.bias(grid_hw), grid_hw, E)
            out.append(dict(name=name, kind='relative_bias', hw=grid_hw,
                            grid=per_head.mean(0), per_head=per_head))
        else:
            table = pe.table(grid_hw)[0, E:]
            out.append(dict(name=name, kind='cosine', hw=grid_hw,
                            grid=cosine_similarity_grid(table, grid_hw)))
    return out
