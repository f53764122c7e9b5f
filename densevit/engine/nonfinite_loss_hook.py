"""Stop training on a non-finite loss or gradient norm, naming the iteration (DETR's own
guard)."""
import math

from mmengine.hooks import Hook

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
    """

    priority = 'VERY_HIGH'

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
        if grad_norm is not None and not math.isfinite(grad_norm.current()):
            raise NonFiniteLossError(
                f'Training stopped: the gradient norm is {grad_norm.current()} at iteration '
                f'{runner.iter + 1} (epoch {runner.epoch + 1}) although the loss is {value:.4g}; '
                f'the weights updated in this step are no longer finite. Lower the learning '
                f'rate, check the data, or resume from the last checkpoint.')
