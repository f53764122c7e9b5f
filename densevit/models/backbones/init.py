"""The weight initialisations that ViT and Swin share (timm / the official code), and MAE's."""
from torch import nn


def init_linear_or_norm(m, xavier=False):
    """Linear: weight ~ truncated N(0, 0.02) (``xavier``: Xavier-uniform, as MAE's code),
    bias 0; LayerNorm: identity (weight 1, bias 0). Returns whether ``m`` was one of the
    two, so a caller's loop over ``modules()`` can handle the others in the same order
    (the random stream, and so every initial weight for a given seed, depends on that
    order)."""
    if isinstance(m, nn.Linear):
        if xavier:
            nn.init.xavier_uniform_(m.weight)
        else:
            nn.init.trunc_normal_(m.weight, std=.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
        return True
    if isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
        return True
    return False
