"""Principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

The patch projection is D filters of size C x P x P. Their top principal
components (filters centred on the mean filter, then SVD) are the basis the
embedding mostly spans; drawn as RGB tiles they look like Gabor-like / plaid
patterns for a trained ViT.
"""
import torch


def patch_embedding_pcs(weight, num_components=28):
    """weight [D, C, P, P] -> (components [k, C, P, P] unit norm, explained variance ratio [k]).

    The sign of a component is arbitrary (SVD); it is fixed so that the largest
    absolute entry is positive, for reproducible pictures.
    """
    D = weight.shape[0]
    x = weight.detach().double().reshape(D, -1)
    x = x - x.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    k = min(num_components, vh.shape[0])
    pcs = vh[:k]
    sign = torch.sign(pcs.gather(1, pcs.abs().argmax(1, keepdim=True)))
    pcs = pcs * sign
    var = s ** 2
    return pcs.reshape(k, *weight.shape[1:]), (var[:k] / var.sum().clamp_min(1e-300))


def to_unit_range(x):
    """Min-max normalise each leading entry of x [k, ...] to [0, 1]."""
    flat = x.reshape(x.shape[0], -1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    return ((flat - lo) / (hi - lo).clamp_min(1e-12)).reshape(x.shape)
