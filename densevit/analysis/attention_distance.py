"""Mean attention distance (ViT paper, Fig. 7 right and Fig. 11).

For a query patch q the attention distance is sum_k a[q, k] * |c_q - c_k|, with c
the patch centres in pixels (grid index x patch size); it is averaged over the
query patches and the images, per layer and head. Extra (class) tokens are
left out on both sides, and each query's weights over the patches are
renormalised to sum to 1, so attention parked on the class token counts
neither as "near" nor as "far" (it has no position). The paper's "receptive
field size" analogy holds for the patch-to-patch part only.
"""
import torch


def patch_distances(hw, patch_size=1.):
    """[N, N] Euclidean distance between patch centres, N = h*w in raster order."""
    h, w = hw
    rows = torch.arange(h, dtype=torch.float64).repeat_interleave(w)
    cols = torch.arange(w, dtype=torch.float64).repeat(h)
    c = torch.stack([rows, cols], -1) * patch_size
    return torch.cdist(c, c)


def mean_attention_distance(attn, hw, patch_size, num_extra_tokens=0):
    """Per-head mean attention distance of one layer's attention over a batch.

    Args:
        attn: [B, heads, E + N, E + N] weights (rows sum to 1).
        hw (tuple[int, int]): patch grid, N = h * w.
        patch_size (float): pixels per patch (the distance unit).
        num_extra_tokens (int): E, dropped from queries and keys.

    Returns:
        [B, heads] float64: mean over query patches, per image.
    """
    E = num_extra_tokens
    a = attn[..., E:, E:].double()
    a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
    d = patch_distances(hw, patch_size).to(a.device)
    return (a * d).sum(-1).mean(-1)
