"""NonFiniteLossHook: a NaN / inf loss stops training with an error naming the iteration."""
import math
from types import SimpleNamespace

import pytest
import torch
from mmengine.model import BaseModel
from torch import nn

from densevit.engine.nonfinite_loss_hook import NonFiniteLossError, NonFiniteLossHook
from densevit.registry import MODELS

from tiny_run import load_tool, unique_names, write_config


@MODELS.register_module(force=True)
class LossTurnsNaN(BaseModel):
    """One weight; its loss is finite until the ``nan_from``-th training step, then NaN."""

    def __init__(self, nan_from=3, data_preprocessor=None):
        super().__init__(data_preprocessor=data_preprocessor)
        self.weight = nn.Parameter(torch.ones(()))
        self.nan_from = nan_from
        self.steps = 0

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.weight * inputs.float().mean()
        if mode != 'loss':
            return out
        self.steps += 1
        return dict(loss_fake=out * (math.nan if self.steps >= self.nan_from else 1.0))


class _NaNGradient(torch.autograd.Function):
    """Identity forward; NaN backward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * math.nan


@MODELS.register_module(force=True)
class GradientTurnsNaN(LossTurnsNaN):
    """The loss stays finite; from the ``nan_from``-th step its gradient is NaN (the
    detection case: ``grad_norm: nan`` logged, then NaN weights one iteration later)."""

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.weight * inputs.float().mean()
        if mode != 'loss':
            return out
        self.steps += 1
        return dict(loss_fake=_NaNGradient.apply(out) if self.steps >= self.nan_from else out)


NAN_MODEL = """
model = dict(_delete_=True, type='LossTurnsNaN', nan_from=3,
             data_preprocessor=dict(type='DetDataPreprocessor', pad_size_divisor=8))
"""


def test_training_stops_at_the_first_nan_iteration(tmp_path):
    config = write_config(tmp_path, extra=NAN_MODEL)
    train_tool = load_tool('tools/train.py')
    with pytest.raises(NonFiniteLossError, match=r'iteration 3\b') as info:
        train_tool.main([config, '--work-dir', str(tmp_path / 'work'), '--cfg-options',
                         'train_cfg.max_iters=6', *unique_names()])
    assert 'loss is nan' in str(info.value) and 'loss_fake=nan' in str(info.value)
    # stopped before anything else ran on the bad step: the iteration-2 checkpoint is the last
    assert (tmp_path / 'work' / 'iter_2.pth').is_file()
    assert not (tmp_path / 'work' / 'iter_4.pth').exists()


def test_a_nan_gradient_stops_at_its_iteration(tmp_path):
    config = write_config(tmp_path, extra=NAN_MODEL.replace('LossTurnsNaN', 'GradientTurnsNaN')
                          + "optim_wrapper = dict(clip_grad=dict(max_norm=0.1, norm_type=2))\n")
    with pytest.raises(NonFiniteLossError, match=r'gradient norm is nan at iteration 3\b'):
        load_tool('tools/train.py').main([config, '--work-dir', str(tmp_path / 'work'),
                                          '--cfg-options', 'train_cfg.max_iters=6',
                                          *unique_names()])


def test_a_floating_point_error_inside_the_model_names_the_iteration(tmp_path):
    """Without clip_grad nothing logs the gradient norm: the NaN weights of iteration 3
    make iteration 4 fail inside the model (as DETR's matcher does); the error says 4."""
    from densevit.registry import MODELS as M

    @M.register_module(force=True)
    class FailsOnNaNWeights(GradientTurnsNaN):
        def forward(self, inputs, data_samples=None, mode='tensor'):
            if mode == 'loss' and not torch.isfinite(self.weight):
                raise FloatingPointError('HungarianMatcher: the matching cost holds NaN')
            return super().forward(inputs, data_samples, mode)

    config = write_config(tmp_path, extra=NAN_MODEL.replace('LossTurnsNaN', 'FailsOnNaNWeights')
                          + "optim_wrapper = dict(clip_grad=None)\n")
    with pytest.raises(NonFiniteLossError,
                       match=r'stopped at iteration 4 \(epoch 1\): HungarianMatcher'):
        load_tool('tools/train.py').main([config, '--work-dir', str(tmp_path / 'work'),
                                          '--cfg-options', 'train_cfg.max_iters=6',
                                          *unique_names()])


def fake_runner(iter=0, epoch=0):
    return SimpleNamespace(iter=iter, epoch=epoch)


@pytest.mark.parametrize('loss', [1.5, torch.tensor(0.0), torch.tensor(1e30)])
def test_hook_passes_finite_losses(loss):
    NonFiniteLossHook().after_train_iter(fake_runner(), 0, outputs=dict(loss=loss))


@pytest.mark.parametrize('outputs', [None, {}, dict(loss_cls=torch.tensor(math.nan))])
def test_hook_ignores_outputs_without_a_total_loss(outputs):
    NonFiniteLossHook().after_train_iter(fake_runner(), 0, outputs=outputs)


@pytest.mark.parametrize('loss, shown', [(torch.tensor(math.nan), 'nan'),
                                         (torch.tensor(math.inf), 'inf'),
                                         (-math.inf, '-inf')])
def test_hook_raises_on_non_finite_loss(loss, shown):
    outputs = dict(loss=loss, loss_cls=torch.tensor(0.25), loss_bbox=torch.tensor(math.inf))
    with pytest.raises(NonFiniteLossError) as info:
        NonFiniteLossHook().after_train_iter(fake_runner(iter=41, epoch=2), 7, outputs=outputs)
    msg = str(info.value)
    # runner.iter is 0-based and not yet advanced in after_train_iter: iteration 42
    assert f'loss is {shown} at iteration 42 (epoch 3)' in msg
    assert 'loss_cls=0.25' in msg and 'loss_bbox=inf' in msg
    assert isinstance(info.value, FloatingPointError)


def test_hook_runs_before_logging_and_checkpointing():
    from mmengine.runner.priority import get_priority
    assert get_priority(NonFiniteLossHook.priority) < get_priority('BELOW_NORMAL')  # LoggerHook


def _skipping_runner(init_scale):
    """A runner whose fp16 loss scaler (as in ``AmpOptimWrapper``, here on CPU) has just
    met an inf gradient: the real ``GradScaler.step`` skipped the step and halved the scale."""
    from mmengine.logging import MessageHub
    weight = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler('cpu', init_scale=init_scale)
    scaler.scale(weight.sum()).backward()
    weight.grad[0] = math.inf
    scaler.unscale_(optimizer)
    grad_norm = torch.linalg.vector_norm(weight.grad)
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(weight.detach(), torch.ones(2))  # skipped: the weights unchanged
    hub = MessageHub.get_instance('nonfinite_amp_test')
    hub.update_scalar('train/grad_norm', float(grad_norm))
    return SimpleNamespace(iter=9, epoch=0, message_hub=hub,
                           optim_wrapper=SimpleNamespace(loss_scaler=scaler))


def test_an_fp16_skipped_step_is_logged_not_fatal(capsys):
    """The first steps of fp16 AMP overflow at scale 65536 (DETR's do on an H100)."""
    from mmengine.logging import MMLogger
    MMLogger.get_instance('nonfinite_amp_test', log_level='INFO')  # 'current', on captured stdout
    runner = _skipping_runner(init_scale=65536.0)
    NonFiniteLossHook().after_train_iter(runner, 0, outputs=dict(loss=torch.tensor(26.4)))
    assert 'step skipped by the fp16 loss scaler; loss scale now 32768' in capsys.readouterr().out


def test_non_finite_gradients_at_a_scale_below_one_stop_training():
    runner = _skipping_runner(init_scale=1.0)  # halved to 0.5
    with pytest.raises(NonFiniteLossError,
                       match=r'gradient norm is inf at iteration 10 .* fp16 loss scale has fallen '
                             r'to 0.5 \(below 1\)'):
        NonFiniteLossHook().after_train_iter(runner, 0, outputs=dict(loss=torch.tensor(1.0)))
