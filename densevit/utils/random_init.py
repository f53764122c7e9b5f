"""Random weights for reference models, so that every mis-mapped tensor shows in outputs.

Reference implementations initialise biases to zero, norms to identity, BatchNorm
statistics to 0 / 1 and relative-position tables to (near) zero: a converter that
swaps two such tensors would still reproduce the reference. :func:`randomize_`
draws every floating-point parameter and buffer from one seed instead (the
equivalence tests, ``benchmarks/bench_detr_peers.py``).
"""
import zlib

import torch
from torch import nn

_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def randomize_(model, seed=0, scale=0.2, fan_in=False, embedding_scale=None):
    """Fill every floating-point parameter and buffer of ``model`` in place.

    Only what ``state_dict`` holds is drawn (what a checkpoint carries): a
    non-persistent buffer (a data preprocessor's mean / std, a fixed table) keeps
    its value, since a converted copy could never receive a random one.
    Norm-layer weights (any module whose class name has ``Norm``, so frozen
    BatchNorm's scale buffer too) are ``1 + scale * N(0, 1)``, running variances
    ``0.5 + |N(0, 1)|`` (positive), everything else ``scale * N(0, 1)`` (biases,
    running means, position and relative-bias tables included). Integer buffers
    (index tables, ``num_batches_tracked``) are left alone. Tied tensors are drawn
    once per name, so stay tied.

    Args:
        fan_in (bool): tensors of 2 or more dimensions (not norms or embeddings) from
            N(0, 1 / fan_in) instead, fan_in being the size of ``t[0]``: scales that keep
            a full-size deep model's activations finite.
        embedding_scale (float | None): ``nn.Embedding`` weights (object queries, anchors)
            from ``embedding_scale * N(0, 1)`` instead (e.g. 1, so that the queries predict
            different things and a mix-up of query rows shows).

    Returns:
        ``model``.
    """
    g = torch.Generator().manual_seed(seed)
    norm_weights = {id(m.weight) for m in model.modules()
                    if (isinstance(m, _NORMS) or 'Norm' in type(m).__name__)
                    and torch.is_tensor(getattr(m, 'weight', None))}
    embeddings = set() if embedding_scale is None else {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    with torch.no_grad():
        for name, t in model.state_dict(keep_vars=True).items():
            if not t.is_floating_point():
                continue
            noise = torch.randn(t.shape, generator=g)
            if name.endswith('running_var'):
                t.copy_(0.5 + noise.abs())
            elif id(t) in norm_weights:
                t.copy_(1 + scale * noise)
            elif id(t) in embeddings:
                t.copy_(embedding_scale * noise)
            elif fan_in and t.dim() >= 2:
                t.copy_(noise / t[0].numel() ** 0.5)
            else:
                t.copy_(scale * noise)
    return model


def random_projections(name, tensor, num=2):
    """``tensor`` (any shape) -> [num] float64 sums of ``tensor`` times U(-1, 1) draws seeded
    by ``name`` (its CRC-32): a few numbers that move with any entry, which an equivalence
    fixture stores in place of a large tensor (a gradient) and a test recomputes."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    t = tensor.detach().double().cpu()
    return torch.stack([(t * (torch.rand(t.shape, generator=g, dtype=torch.float64) * 2 - 1))
                        .sum() for _ in range(num)])
