"""Stop training on a non-finite loss or gradient norm, naming the iteration (DETR's own
guard)."""
import math

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.optim import OptimWrapperDict

from densevit.registry import HOOKS


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raise :class:`NonFiniteLossError` as soon as ``loss`` or the gradient norm is NaN
    or inf.

    mmengine's ``CheckInvalidLossHook`` checks every ``interval`` iterations and does
    not say where; a single scalar check per iteration costs nothing. The gradient
    norm (logged by the optimizer wrapper when ``clip_grad`` is set) matters as much:
    a finite loss with a NaN gradient turns the weights into NaN, and the next
    iteration would fail somewhere else (a detector's matcher) instead of here.

    Under fp16 AMP (mmengine's ``AmpOptimWrapper``) a non-finite gradient norm is expected
    now and then: the dynamic loss scaler skips that step (the weights stay as they were)
    and halves the scale. Such a step is logged, not fatal; training stops only when the
    scale has fallen below ``min_loss_scale`` — the gradients are not finite even unscaled.
    """

    priority = 'VERY_HIGH'

    def __init__(self, min_loss_scale=1.0):
        self.min_loss_scale = min_loss_scale

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        loss = (outputs or {}).get('loss')
        if loss is None:
            return
        value = float(loss.detach()) if hasattr(loss, 'detach') else float(loss)
        if not math.isfinite(value):
            parts = ', '.join(f'{k}={float(v.detach() if hasattr(v, "detach") else v):.4g}'
                              for k, v in outputs.items())
            raise NonFiniteLossError(
                f'Training stopped: the loss is {value} at iteration {runner.iter + 1} '
                f'(epoch {runner.epoch + 1}): {parts}. Lower the learning rate, check the '
                f'data for degenerate boxes, or resume from the last checkpoint.')
        hub = getattr(runner, 'message_hub', None)
        grad_norm = hub.log_scalars.get('train/grad_norm') if hub is not None else None
        if grad_norm is None or math.isfinite(grad_norm.current()):
            return
        scale = _loss_scale(runner)
        if scale is not None and scale >= self.min_loss_scale:
            print_log(f'iteration {runner.iter + 1}: gradient norm {grad_norm.current()}, '
                      f'step skipped by the fp16 loss scaler; loss scale now {scale:g}',
                      logger='current')
            return
        if scale is not None:
            raise NonFiniteLossError(
                f'Training stopped: the gradient norm is {grad_norm.current()} at iteration '
                f'{runner.iter + 1} (epoch {runner.epoch + 1}) and the fp16 loss scale has '
                f'fallen to {scale:g} (below {self.min_loss_scale:g}): the gradients are not '
                f'finite at any scale. Lower the learning rate, check the data, or train '
                f'without --amp to find the layer.')
        raise NonFiniteLossError(
            f'Training stopped: the gradient norm is {grad_norm.current()} at iteration '
            f'{runner.iter + 1} (epoch {runner.epoch + 1}) although the loss is {value:.4g}; '
            f'the weights updated in this step are no longer finite. Lower the learning '
            f'rate, check the data, or resume from the last checkpoint.')


def _loss_scale(runner):
    """The current scale of the run's enabled loss scaler (fp16 AMP), else None."""
    wrapper = getattr(runner, 'optim_wrapper', None)
    wrappers = wrapper.values() if isinstance(wrapper, OptimWrapperDict) else [wrapper]
    for w in wrappers:
        scaler = getattr(w, 'loss_scaler', None)
        if scaler is not None and scaler.is_enabled():
            return float(scaler.get_scale())
    return None
