"""Sharpness-Aware Minimization (SAM, Foret et al. 2021; ASAM, Kwon et al. 2021).

Each iteration makes two forward-backward passes:

1. the usual one at the weights ``w`` gives ``g1``; the perturbation is
   ``e = rho * g1 / ||g1||`` (SAM) or, with ``adaptive=True``,
   ``e = rho * T^2 g1 / ||T g1||`` with ``T = |w| + eta`` elementwise (ASAM);
2. the same batch again at ``w + e`` gives ``g2``; the weights go back to ``w`` and the
   base optimizer steps with ``g2``.

How the second pass gets the model and the batch: densevit's detectors and segmentors
all use mmengine's ``BaseModel.train_step`` (as does ``MMDistributedDataParallel``),
which runs the preprocessor and the ``mode='loss'`` forward inside
``optim_wrapper.optim_context(model)`` and then calls ``update_params(loss)``. This
wrapper's ``optim_context`` puts a forward pre-hook on the model for the length of that
block and keeps the arguments of its ``mode='loss'`` call; ``update_params`` calls the
model with them once more (in the base wrapper's context: autocast, DDP sync) and
reduces the losses with the model's own ``parse_losses``. No model and no training loop
changes, so it works for every model type; a ``train_step`` that does not go through
``optim_context`` gets a clear error instead of a silent plain step.

- ``clip_grad`` is applied to the second gradient ``g2`` (the one the optimizer steps
  with), never to ``g1``; the perturbation uses the unclipped ``g1``.
- ``accumulative_counts > 1`` is refused: the perturbation would come from the gradient
  accumulated over N micro-batches, but the second gradient must then be taken at
  ``w + e`` on the same N micro-batches, of which only the last is still at hand.
  Using the last one alone would be a different update, not SAM.
- AMP: ``SAMCPUAmpOptimWrapper`` (``tools/train.py --amp`` on CPU) runs both forward
  passes under bf16 autocast; gradients, weights and the perturbation stay float32. On
  CUDA, ``--amp`` (fp16 with a loss scaler) is refused at build time: see
  :func:`densevit.engine.amp_optim_wrapper.amp_optim_wrapper`.
- Random layers (dropout, drop path) draw new masks in the second pass; BatchNorm
  running statistics are updated by both passes.

Cost: two forward-backward passes per iteration (about twice the time of a plain step),
the same memory plus one copy of the weights (restored exactly after the second pass).
"""
import contextlib
import numbers

import torch
from mmengine.optim import OptimWrapper

from densevit.engine.amp_optim_wrapper import CPUAmpOptimWrapper
from densevit.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class SAMOptimWrapper(OptimWrapper):
    """``OptimWrapper`` making the two-step SAM / ASAM update around its optimizer.

    Config::

        optim_wrapper = dict(type='SAMOptimWrapper', rho=0.05,
                             optimizer=dict(type='SGD', lr=0.01, momentum=0.9))

    Args:
        rho (float): radius of the neighbourhood, > 0 (SAM: 0.05; ASAM: larger, e.g. 0.5-2).
        adaptive (bool): ASAM's scale-invariant neighbourhood, ``T = |w| + eta``.
        eta (float): ASAM's offset in ``T`` (0 gives ``T = |w|``), >= 0.
        **kwargs: as ``mmengine.optim.OptimWrapper`` (optimizer, clip_grad); the
            optimizer must be a ``torch.optim.Optimizer``; ``accumulative_counts`` must
            be 1.

    Raises:
        ValueError: ``rho <= 0``, ``eta < 0`` or ``accumulative_counts > 1``.
        TypeError: the optimizer is not a ``torch.optim.Optimizer``: SAM moves and
            restores the tensors of its ``param_groups`` itself.
    """

    def __init__(self, rho=0.05, adaptive=False, eta=0.0, **kwargs):
        if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not rho > 0:
            raise ValueError(f'SAMOptimWrapper: rho must be a number > 0, got {rho!r} '
                             '(rho=0 is plain training: use OptimWrapper)')
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not eta >= 0:
            raise ValueError(f'SAMOptimWrapper: eta must be a number >= 0, got {eta!r}')
        optimizer = kwargs.get('optimizer')
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError('SAMOptimWrapper wraps a torch.optim.Optimizer (it perturbs and '
                            'restores the parameters of its param_groups), got '
                            f'{type(optimizer).__name__}')
        counts = kwargs.get('accumulative_counts', 1)
        if counts != 1:
            raise ValueError(
                f'SAMOptimWrapper cannot accumulate gradients (accumulative_counts={counts}): '
                'the second gradient must be taken at w + e on all the accumulated '
                'micro-batches, and only the last one is still at hand; raise the batch '
                'size instead')
        super().__init__(**kwargs)
        self.rho, self.adaptive, self.eta = float(rho), bool(adaptive), float(eta)
        self._sam_model = None
        self._sam_call = None

    @contextlib.contextmanager
    def optim_context(self, model):
        def keep_loss_call(module, args, kwargs):
            if kwargs.get('mode') == 'loss':
                self._sam_call = (args, dict(kwargs))

        self._sam_model, self._sam_call = model, None
        handle = model.register_forward_pre_hook(keep_loss_call, with_kwargs=True)
        try:
            with super().optim_context(model):
                yield
        finally:
            handle.remove()

    def _params(self):
        return [p for group in self.optimizer.param_groups for p in group['params']
                if p.grad is not None]

    @torch.no_grad()
    def _perturbation(self, params):
        """``e`` for each parameter from its current ``.grad`` (float32 math)."""
        if self.adaptive:
            scales = [p.abs() + self.eta for p in params]
            scaled = [s * p.grad for s, p in zip(scales, params, strict=True)]
        else:
            scales, scaled = None, [p.grad for p in params]
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.float()) for g in scaled]))
        factor = self.rho / norm.clamp_min(1e-12)
        if scales is None:
            return [g * factor for g in scaled]
        return [s * g * factor for s, g in zip(scales, scaled, strict=True)]

    def update_params(self, loss, step_kwargs=None, zero_kwargs=None):
        step_kwargs, zero_kwargs = step_kwargs or {}, zero_kwargs or {}
        model, call = self._sam_model, self._sam_call
        self._sam_call = None
        if call is None:
            raise RuntimeError(
                'SAMOptimWrapper needs the loss computed inside optim_wrapper.optim_context('
                "model) by a model(..., mode='loss') call (mmengine's BaseModel.train_step "
                'does this); it saw no such call, so it cannot run the second forward pass')
        self.backward(self.scale_loss(loss))
        params = self._params()
        offsets = self._perturbation(params)
        originals = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, e in zip(params, offsets, strict=True):
                p.add_(e)
        del offsets
        self.zero_grad(**zero_kwargs)
        try:
            with super().optim_context(model):
                losses = model(*call[0], **call[1])
            second, _ = getattr(model, 'module', model).parse_losses(losses)
            second.backward()
        finally:
            with torch.no_grad():
                for p, w in zip(params, originals, strict=True):
                    p.copy_(w)
        self.step(**step_kwargs)
        self.zero_grad(**zero_kwargs)


@OPTIM_WRAPPERS.register_module()
class SAMCPUAmpOptimWrapper(SAMOptimWrapper, CPUAmpOptimWrapper):
    """:class:`SAMOptimWrapper` with both forward passes under bf16 CPU autocast
    (``tools/train.py --amp`` on a ``SAMOptimWrapper`` config on CPU).

    Args:
        dtype (str | torch.dtype): autocast dtype, 'bfloat16' (default).
        **kwargs: as :class:`SAMOptimWrapper`.
    """
