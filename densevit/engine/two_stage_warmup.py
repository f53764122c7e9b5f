"""EoMT's two-stage warm-up with polynomial decay (Kerssies et al. 2025; its trainer's
learning-rate schedule), as an mmengine parameter scheduler.

New layers (queries, mask module, class head, neck) warm up first while the pre-trained
backbone stands still, then the backbone warms up, then both decay polynomially to 0. With
``w1, w2 = warmup``, ``T = end - begin`` and ``t`` the step since ``begin``, a group whose
initial learning rate is ``lr0`` gets:

- not the backbone's: ``lr0 * t / w1`` for ``t < w1``, then
  ``lr0 * (1 - (t - w1) / (T - w1)) ** power``;
- the backbone's: 0 for ``t < w1``, ``lr0 * (t - w1) / w2`` for ``t < w1 + w2``, then
  ``lr0 * (1 - (t - w1 - w2) / (T - w1 - w2)) ** power``.

The backbone's groups are those of :class:`LayerDecayOptimWrapperConstructor` whose
``layer_id`` is below the largest (which is everything after the backbone's last block: the
final norm warms up with the new layers, where EoMT's trainer holds it with the backbone).
Each value is computed from ``lr0`` in closed form, so the schedule resumes exactly.
"""
from mmengine.optim.scheduler.lr_scheduler import LRSchedulerMixin
from mmengine.optim.scheduler.param_scheduler import _ParamScheduler

from densevit.registry import PARAM_SCHEDULERS


@PARAM_SCHEDULERS.register_module()
class TwoStageWarmupPolyLR(LRSchedulerMixin, _ParamScheduler):
    """Args:
        optimizer: built by ``LayerDecayOptimWrapperConstructor`` (its groups' ``layer_id``).
        warmup (tuple[int, int]): (w1, w2) above; EoMT: (500, 1000).
        power (float): of the decay; EoMT's 0.9.
        begin, end (int): the steps it covers (``end``: the run's last iteration).
    """

    def __init__(self, optimizer, warmup=(500, 1000), power=0.9, begin=0, end=None,
                 last_step=-1, by_epoch=False, verbose=False):
        if end is None:
            raise ValueError('TwoStageWarmupPolyLR: give end (the run\'s last iteration)')
        # an OptimWrapper adds a group of its own (``base_param_settings``: the logged base_lr),
        # with no layer_id: it follows the new layers' schedule
        groups = optimizer.param_groups
        if not any('layer_id' in g for g in groups):
            raise ValueError('TwoStageWarmupPolyLR needs the parameter groups of '
                             "LayerDecayOptimWrapperConstructor (each with a 'layer_id'); set "
                             "optim_wrapper.constructor='LayerDecayOptimWrapperConstructor'")
        w1, w2 = warmup
        if w1 < 0 or w2 < 0 or w1 + w2 >= end - begin:
            raise ValueError(f'TwoStageWarmupPolyLR: warmup={tuple(warmup)} must be two '
                             f'non-negative step counts that end before the schedule\'s '
                             f'{end - begin} steps')
        top = max(g['layer_id'] for g in groups if 'layer_id' in g)
        self.is_backbone = [g.get('layer_id', top) < top for g in groups]
        self.warmup, self.power = (w1, w2), power
        super().__init__(optimizer, begin=begin, end=end, last_step=last_step,
                         by_epoch=by_epoch, verbose=verbose)

    def factor(self, t, backbone):
        """The multiplier of a group's initial learning rate at step ``t``."""
        w1, w2 = self.warmup
        total = self.end - self.begin
        if backbone:
            if t < w1:
                return 0.
            if t < w1 + w2:
                return (t - w1) / w2
            start = w1 + w2
        else:
            if t < w1:
                return t / w1
            start = w1
        return max(1. - (t - start) / (total - start), 0.) ** self.power

    def _get_value(self):
        return [base * self.factor(self.last_step, backbone)
                for base, backbone in zip(self.base_values, self.is_backbone, strict=True)]
