"""Random weights for reference models, so that every mis-mapped tensor shows in outputs.

Reference implementations initialise biases to zero, norms to identity, BatchNorm
statistics to 0 / 1 and relative-position tables to (near) zero: a converter that
swaps two such tensors would still reproduce the reference. :func:`randomize_`
draws every floating-point parameter and buffer from one seed instead.
"""
import torch
from torch import nn

_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def randomize_(model, seed=0, scale=0.2):
    """Fill every floating-point parameter and buffer of ``model`` in place.

    Norm-layer weights are ``1 + scale * N(0, 1)``, running variances
    ``0.5 + |N(0, 1)|`` (positive), everything else ``scale * N(0, 1)``
    (biases, running means, position and relative-bias tables included).
    Integer buffers (index tables, ``num_batches_tracked``) are left alone.

    Returns:
        ``model``.
    """
    g = torch.Generator().manual_seed(seed)
    norm_weights = {id(m.weight) for m in model.modules()
                    if isinstance(m, _NORMS) and getattr(m, 'weight', None) is not None}
    with torch.no_grad():
        tensors = list(model.named_parameters()) + list(model.named_buffers())
        for name, t in tensors:
            if not t.is_floating_point():
                continue
            noise = torch.randn(t.shape, generator=g)
            if name.endswith('running_var'):
                t.copy_(0.5 + noise.abs())
            elif id(t) in norm_weights:
                t.copy_(1 + scale * noise)
            else:
                t.copy_(scale * noise)
    return model
