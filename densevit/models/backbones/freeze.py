"""Freezing the first stages of a backbone (``frozen_stages``).

A frozen module gets no gradients and runs in eval mode: no dropout or drop
path, and BatchNorm keeps its running statistics. ``nn.Module.train()`` switches
every module back to training mode, so a backbone calls :func:`freeze` again
from its ``train`` override, not only once in ``__init__``.
"""


def freeze(modules=(), params=()):
    """Put ``modules`` in eval mode and stop gradients to their parameters and to
    ``params`` (loose ``nn.Parameter``, e.g. ViT's class token)."""
    for m in modules:
        m.eval()
        for p in m.parameters():
            p.requires_grad = False
    for p in params:
        p.requires_grad = False
