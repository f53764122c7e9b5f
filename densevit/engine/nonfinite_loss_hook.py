"""Stop training on a non-finite loss, naming the iteration (DETR's own guard)."""
import math

from mmengine.hooks import Hook

from densevit.registry import HOOKS


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raise :class:`NonFiniteLossError` as soon as ``loss`` is NaN or inf.

    mmengine's ``CheckInvalidLossHook`` checks every ``interval`` iterations and does
    not say where; a single scalar check per iteration costs nothing.
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
