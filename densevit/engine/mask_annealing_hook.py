"""Anneals EoMT's masked attention during training (see
:mod:`densevit.models.segmentors.mask_annealing`)."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from densevit.models.segmentors.mask_annealing import (
    annealed_probability,
    check_steps,
    staggered_steps,
)
from densevit.registry import HOOKS


@HOOKS.register_module()
class MaskAnnealingHook(Hook):
    """Before every training iteration, set each block's masking probability
    (``model.attn_mask_probs`` [N]) to its annealed value after ``runner.iter`` optimiser steps
    (poly, power 0.9 by default), as the official EoMT trainer does after each step.

    A resumed run recomputes the probabilities from its iteration, so they continue where
    they were. Validation and testing do not read them: EoMT predicts without masked
    attention (``EoMT.test_cfg``).

    Args:
        start_iters, end_iters (Sequence[int], optional): per block (N entries), the
            iteration at which its annealing starts and the one from which it is 0. Both None:
            the official configs' stagger over ``runner.max_iters``
            (:func:`~densevit.models.segmentors.mask_annealing.staggered_steps`).
        power (float): the poly power (0.9).
    """

    priority = 'NORMAL'

    def __init__(self, start_iters=None, end_iters=None, power=0.9):
        if (start_iters is None) != (end_iters is None):
            raise ValueError('MaskAnnealingHook: give both start_iters and end_iters, or '
                             'neither (the official stagger over max_iters)')
        self.start_iters = None if start_iters is None else list(start_iters)
        self.end_iters = None if end_iters is None else list(end_iters)
        self.power = power

    @staticmethod
    def _model(runner):
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        if not hasattr(model, 'attn_mask_probs'):
            raise TypeError(f'MaskAnnealingHook anneals the masked attention of EoMT; '
                            f'{type(model).__name__} has no attn_mask_probs')
        return model

    def steps(self, runner):
        """(start_iters, end_iters) of this run, checked against the model's blocks."""
        num_blocks = self._model(runner).num_blocks
        if self.start_iters is None:
            return staggered_steps(runner.max_iters, num_blocks)
        check_steps(self.start_iters, self.end_iters, num_blocks)
        return self.start_iters, self.end_iters

    def before_train(self, runner):
        self._steps = self.steps(runner)
        runner.logger.info(f'MaskAnnealingHook: masked attention per block annealed from '
                           f'iterations {self._steps[0]} to {self._steps[1]} '
                           f'(poly, power {self.power})')

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        model = self._model(runner)
        starts, ends = self._steps
        for b, (start, end) in enumerate(zip(starts, ends, strict=True)):
            model.attn_mask_probs[b] = annealed_probability(runner.iter, start, end, self.power)
