"""Updates DINO self-distillation's teacher after each optimiser step (see
:class:`densevit.models.selfsup.dino_ssl.DINOSelfDistillation`)."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from densevit.registry import HOOKS


@HOOKS.register_module()
class DINOTeacherUpdateHook(Hook):
    """After every training iteration whose optimiser stepped, make the teacher an EMA of the
    student (``model.update_teacher()``: momentum on DINO's cosine schedule, counted by the
    model's own ``steps`` buffer, which the checkpoint keeps) and log the momentum used.

    A hook rather than an override of ``train_step``: mmengine's distributed wrapper
    (``MMDistributedDataParallel.train_step``) runs the forward and the optimiser itself and
    never calls the model's ``train_step``, while hooks run in every setting. With gradient
    accumulation (``optim_wrapper.accumulative_counts``) the teacher moves only on the
    iterations where the optimiser stepped.
    """

    priority = 'ABOVE_NORMAL'  # before the checkpoint hook saves this iteration

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        wrapper = runner.optim_wrapper
        should_update = getattr(wrapper, 'should_update', None)
        if should_update is not None and not should_update():
            return
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        momentum = model.update_teacher()
        runner.message_hub.update_scalar('train/teacher_momentum', momentum)
