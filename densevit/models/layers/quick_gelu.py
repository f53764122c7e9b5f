"""QuickGELU: the sigmoid approximation of GELU that OpenAI's CLIP was trained with."""
import torch
from mmengine.registry import MODELS as MMENGINE_MODELS
from torch import nn


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)`` (Hendrycks & Gimpel 2016, Sec. 2's sigmoid approximation of
    GELU): the activation of CLIP's MLPs (Radford et al. 2021; Hugging Face's
    ``hidden_act='quick_gelu'``), which a CLIP checkpoint needs to give CLIP's features.
    Registered for ``build_activation_layer`` as ``dict(type='QuickGELU')``.

    Shapes: any -> the same.
    """

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


# build_activation_layer searches mmengine's root MODELS (as LN2d's build_norm_layer does)
if 'QuickGELU' not in MMENGINE_MODELS.module_dict:
    MMENGINE_MODELS.register_module('QuickGELU', module=QuickGELU)
