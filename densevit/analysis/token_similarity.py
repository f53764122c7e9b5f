"""How far the patch tokens of each ViT layer share one vector.

For a layer's output tokens ``x[b, i]`` (image ``b``, patch ``i``; from its [B, C, h, w]
map):

- ``norm``: the mean token length ``||x[b, i]||``;
- ``cosine``: the mean cosine similarity of two different patches of one image;
- ``common``: the share of the tokens' energy in the one vector they all share,
  ``||mean_{b,i} x[b, i]||^2 / mean_{b,i} ||x[b, i]||^2`` (1: every token is that vector;
  near 0: no shared part);
- ``attn_common`` and ``mlp_common``: the same share for what the layer's attention and
  MLP branches add to the residual stream (their outputs, patch tokens only). Near 1 the
  branch adds one constant vector everywhere: the layer computes nothing that differs
  between places (a "dead" layer).

A ViT whose tokens all point one way (``cosine`` near 1) hands a detection or segmentation
head a large constant plus a small remainder that carries what differs between places.
The MAE quickstart's encoder is such a case (docs/pretraining.md).
"""
import torch
import torch.nn.functional as F


def common_share(x):
    """Tokens [B, N, C] -> the share of their energy in their mean vector (a float)."""
    x = x.double()
    return (x.mean((0, 1)).pow(2).sum() / x.pow(2).sum(-1).mean()).item()


def token_statistics(feat):
    """``norm``, ``cosine`` and ``common`` (floats) of the tokens of ``feat`` [B, C, h, w]."""
    x = feat.flatten(2).transpose(1, 2).double()  # [B, N, C]
    n = x.shape[1]
    if n < 2:
        raise ValueError(f'token statistics need 2 or more patches per image, got {n}')
    unit = F.normalize(x, dim=-1)
    total = unit.sum(1)  # [B, C]: sum over all ordered pairs = ||total||^2, the N self pairs 1
    cosine = ((total * total).sum(-1) - n) / (n * (n - 1))
    return dict(norm=x.norm(dim=-1).mean().item(), cosine=cosine.mean().item(),
                common=common_share(x))


def layer_token_statistics(vit, x):
    """``token_statistics`` of every layer's output for the input batch ``x`` [B, 3, H, W]
    (the last layer after the ViT's final norm, if it has one) with its branches'
    ``attn_common`` and ``mlp_common``; a list of dicts, first layer first."""
    saved = vit.out_indices
    vit.out_indices = list(range(vit.num_layers))
    branches, hooks = {}, []
    E = vit.num_extra_tokens

    def record(key):
        def hook(module, args, out):
            branches[key] = common_share(out[:, E:])
        return hook

    for i, block in enumerate(vit.blocks):
        for name in ('attn', 'mlp'):
            hooks.append(getattr(block, name).register_forward_hook(record((i, name))))
    try:
        with torch.no_grad():
            maps = vit(x)
    finally:
        vit.out_indices = saved
        for h in hooks:
            h.remove()
    return [dict(token_statistics(m), attn_common=branches[(i, 'attn')],
                 mlp_common=branches[(i, 'mlp')]) for i, m in enumerate(maps)]
