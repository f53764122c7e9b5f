"""DINO's projection head (Caron et al. 2021, "Emerging Properties in Self-Supervised Vision
Transformers"): an MLP, an L2-normalised bottleneck and a weight-normalised last layer.

Named ``DINOProjectionHead``: ``DINOHead`` is the DINO-DETR detector's head
(``densevit/models/heads/dino_head.py``).
"""
import math

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from densevit.registry import MODELS


class WeightNormLinear(nn.Module):
    """A Linear layer without bias whose weight is ``g * v / ||v||`` row by row (Salimans &
    Kingma 2016; ``torch.nn.utils.weight_norm(nn.Linear(...), dim=0)``, the official DINO
    code's last layer, with the same state-dict keys ``weight_g`` [out, 1], ``weight_v``
    [out, in]).

    Args:
        in_features, out_features (int): as ``nn.Linear``.
        train_g (bool): False (DINO's ``norm_last_layer=True``): ``weight_g`` is a buffer of
            ones, never trained, so every output is the cosine between the input and a row of
            ``v`` (the rows of the effective weight have unit norm); True: a parameter
            (initialised to 1, as the official code fills it).
    """

    def __init__(self, in_features, out_features, train_g=False):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_v = nn.Parameter(torch.empty(out_features, in_features))
        g = torch.ones(out_features, 1)
        if train_g:
            self.weight_g = nn.Parameter(g)
        else:
            self.register_buffer('weight_g', g)
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's default (Kaiming-uniform, a = sqrt(5)), as the official code leaves v
        nn.init.kaiming_uniform_(self.weight_v, a=math.sqrt(5))
        with torch.no_grad():
            self.weight_g.fill_(1.0)

    @property
    def weight(self):
        """The effective weight [out, in]: row i is ``g_i * v_i / ||v_i||``."""
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)

    def forward(self, x):
        return F.linear(x, self.weight)

    def extra_repr(self):
        return (f'in_features={self.in_features}, out_features={self.out_features}, '
                f'train_g={isinstance(self.weight_g, nn.Parameter)}')


@MODELS.register_module()
class DINOProjectionHead(BaseModule):
    """DINO's projection head on the class token: ``num_layers`` Linear layers with GELU
    between them (``in -> hidden -> ... -> bottleneck``), the bottleneck L2-normalised, then a
    weight-normalised Linear layer without bias to ``out_channels`` logits (the "prototypes").

    Args:
        in_channels (int): the backbone's width (set by the model).
        out_channels (int): K, the prototypes (DINO: 65536 for ImageNet).
        hidden_channels (int): the MLP's hidden width (DINO: 2048).
        bottleneck_channels (int): the normalised bottleneck (DINO: 256).
        num_layers (int): Linear layers of the MLP, >= 1 (DINO: 3).
        norm_last_layer (bool): the last layer's ``g`` fixed to 1 (DINO's default, which its
            authors find makes training more stable), else trained.

    Initialisation (``init_weights``): the MLP's Linear weights truncated N(0, 0.02), biases 0;
    the last layer's ``v`` as ``nn.Linear`` (Kaiming uniform), ``g`` = 1; as the official code.
    """

    def __init__(self, in_channels, out_channels=65536, hidden_channels=2048,
                 bottleneck_channels=256, num_layers=3, norm_last_layer=True, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if num_layers < 1:
            raise ValueError(f'DINOProjectionHead: num_layers must be >= 1, got {num_layers}')
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [bottleneck_channels]
        layers = []
        for i in range(num_layers):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i < num_layers - 1:
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        self.last_layer = WeightNormLinear(bottleneck_channels, out_channels,
                                           train_g=not norm_last_layer)
        self.out_channels = out_channels

    def init_weights(self):
        super().init_weights()
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                nn.init.zeros_(m.bias)
        self.last_layer.reset_parameters()

    def forward(self, x):
        """[..., in_channels] -> [..., out_channels] logits (before any temperature)."""
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))
