"""Position-embedding similarity (ViT paper, Fig. 7 centre and Fig. 10).

For absolute tables (learned 1D / 2D, sine-cosine) tile (i, j) of the figure
is the cosine similarity of patch (i, j)'s embedding to every patch's.
A relative position bias has no per-patch vector; its natural counterpart is
the bias itself: tile (i, j) is the bias a query at (i, j) adds to the logit
of every key, averaged over heads (per-head values are in the numbers file).
RoPE has neither: it rotates each channel pair p of queries and keys by an angle
a_p(m) of the patch m. Its counterpart is the cosine similarity of the implicit
sinusoidal embedding e(m) = [cos a_p(m), sin a_p(m)]_p, i.e. mean_p cos(a_p(m) − a_p(n)):
what a query and a key spread evenly over the pairs score by position alone (1 at
zero offset, a function of the offset only), averaged over heads for RoPE-Mixed's
learned per-head frequencies (per-head values in the numbers file).
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


def rope_similarity_grid(rope, hw):
    """A RoPE module, grid hw -> [1 or heads, h, w, h, w]: mean over channel pairs of
    cos(a_p(query) − a_p(key)), from its rotation (no training-time augmentation)."""
    h, w = hw
    rot = rope.rotation(hw)
    E = rope.num_extra_tokens
    cos, sin = rot.cos[0, :, E:].double(), rot.sin[0, :, E:].double()  # [1 or heads, N, P]
    grid = (cos @ cos.transpose(-1, -2) + sin @ sin.transpose(-1, -2)) / cos.shape[-1]
    return grid.float().reshape(-1, h, w, h, w)


def position_embedding_modules(vit):
    """[(name, module)] of a ViT's position embeddings: one, or one per layer."""
    pe = getattr(vit, 'pos_embed', None)
    if pe is None:
        raise ValueError('this model has no position embedding (type none): nothing to plot')
    if isinstance(pe, nn.ModuleList):
        return [(f'layer{i}', m) for i, m in enumerate(pe)]
    placement = getattr(vit, 'pos_embed_placement', 'stem')
    if getattr(vit, 'pos_embed_kind', None) == 'rotary':
        return [('every_layer', pe)]  # one fixed rotation, used in every layer
    return [('shared' if placement == 'every_layer_shared' else placement, pe)]


@torch.no_grad()
def position_similarity(vit, hw=None):
    """Similarity grids of every position embedding of a ViT backbone.

    Args:
        vit: a ``VisionTransformer`` (or anything with ``pos_embed``).
        hw (tuple[int, int], optional): grid; default, the one the table was made for.

    Returns:
        list of dict(name, kind, hw, grid): ``grid`` [h, w, h, w] (cosine
        similarity, head-mean relative bias, or head-mean RoPE similarity),
        ``per_head`` [heads, h, w, h, w] for a relative bias and RoPE-Mixed;
        ``frequencies`` [1 or heads, 2, d/2] (f_y, f_x per channel pair) for RoPE.
    """
    out = []
    for name, pe in position_embedding_modules(vit):
        grid_hw = tuple(hw or pe.num_patches_hw)
        E = pe.num_extra_tokens
        kind = getattr(pe, 'kind', 'absolute')
        if kind == 'rotary':
            per_head = rope_similarity_grid(pe, grid_hw)
            entry = dict(name=name, kind='rope_similarity', hw=grid_hw, grid=per_head.mean(0),
                         frequencies=pe.frequencies().detach().float())
            if per_head.shape[0] > 1:
                entry['per_head'] = per_head
            out.append(entry)
        elif kind == 'relative':
            per_head = relative_bias_grid(pe.bias(grid_hw), grid_hw, E)
            out.append(dict(name=name, kind='relative_bias', hw=grid_hw,
                            grid=per_head.mean(0), per_head=per_head))
        else:
            table = pe.table(grid_hw)[0, E:]
            out.append(dict(name=name, kind='cosine', hw=grid_hw,
                            grid=cosine_similarity_grid(table, grid_hw)))
    return out
