"""LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers" (CaiT), Sec. 2.1)."""
import torch
from torch import nn


class LayerScale(nn.Module):
    """A learned per-channel scale of a residual branch: ``x + gamma * branch(x)``.

    Starting ``gamma`` small (CaiT: 0.1 to 1e-6 with depth, DINOv2: 1e-5) makes each
    layer start near the identity, which helps deep ViTs train; pretrained weights bring
    their own values (DINOv2's files: ``lambda1``).

    Args:
        embed_dims (int): D.
        init_value (float): every entry of ``gamma`` at initialisation.

    Parameters:
        gamma: [D] (timm's name, ``blocks.N.ls1.gamma``).

    Shapes: [..., D] -> [..., D].
    """

    def __init__(self, embed_dims, init_value):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((embed_dims,), float(init_value)))

    def forward(self, x):
        return x * self.gamma
