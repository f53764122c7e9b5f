"""Where a model's uniform random numbers come from, by name, so that a test can give them.

A model that draws during its forward or loss (EoMT's per-query masking draw, the point
samples of a mask loss) asks one callable, ``draws(name, shape, device, dtype)``, for a
tensor of U[0, 1) numbers. :class:`UniformDraws` is the default: ``torch.rand``, from an
optional ``torch.Generator``. An equivalence test replaces it with a callable that returns
draws it made once and gave to the reference implementation as well, each by its name
(and the order of the calls of one name), whatever order the two implementations draw in.

Names used: ``'query_unmask'`` (EoMT, [B, Q] per masked block), ``'match_points'``
([P, 2] per image and prediction set), ``'oversampled_points'`` ([M, kP, 2] per prediction
set) and ``'random_points'`` ([M, P - int(rP), 2]); see :mod:`densevit.models.losses.point_loss`;
``'aux_positives'`` / ``'aux_negatives'`` (Co-DETR's positive queries, one per image:
which positives are kept, which background anchors pad them); see
:mod:`densevit.models.heads.positive_queries`.
"""
import torch


class UniformDraws:
    """U[0, 1) tensors from ``torch.rand``: the global generator, or ``generator``.

    Args:
        generator (torch.Generator, optional): draws come from it (on its device, then moved
            to the one asked for).
    """

    def __init__(self, generator=None):
        self.generator = generator

    def __call__(self, name, shape, device=None, dtype=torch.float32):
        """``name``: what the draw is for (unused here) -> [*shape] in [0, 1)."""
        if self.generator is None:
            return torch.rand(shape, device=device, dtype=dtype)
        out = torch.rand(shape, generator=self.generator, device=self.generator.device,
                         dtype=dtype)
        return out.to(device)

    def __repr__(self):
        return f'{type(self).__name__}(generator={self.generator!r})'
