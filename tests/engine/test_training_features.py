"""Training features switched on from the config or the command line, each on a tiny run:
AMP (bf16 on CPU), gradient accumulation, EMA, TensorBoard, seeded determinism."""
from pathlib import Path

import pytest
import torch
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from torch import nn

import densevit  # noqa: F401  (allow-list for checkpoints)

from tiny_run import isolated, load_tool, train_losses, unique_names, write_config


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason='--amp means fp16 with a loss scaler on CUDA (tests/cuda, gpu_check.sh)')
def test_amp_on_cpu_autocasts_to_bf16_without_loss_scaler(train_tool, tmp_path):
    config = write_config(tmp_path)
    args = train_tool.parse_args([config, '--amp', '--work-dir', str(tmp_path / 'w'),
                                  '--cfg-options', 'train_cfg.max_iters=2',
                                  'train_cfg.val_begin=100', *unique_names()])
    cfg = train_tool.build_config(args)
    assert cfg.optim_wrapper.type == 'CPUAmpOptimWrapper' and 'loss_scale' not in cfg.optim_wrapper
    runner = Runner.from_cfg(cfg)
    seen = []
    linear = next(m for m in runner.model.backbone.modules() if isinstance(m, nn.Linear))
    linear.register_forward_hook(
        lambda m, i, o: seen.append((o.dtype, torch.is_autocast_enabled('cpu'), m.training)))
    runner.train()
    assert type(runner.optim_wrapper).__name__ == 'CPUAmpOptimWrapper'
    assert [dtype for dtype, _, training in seen if training] == [torch.bfloat16] * 2
    # master weights and optimizer state stay float32
    assert all(p.dtype == torch.float32 for p in runner.model.parameters())
    losses = train_losses(tmp_path / 'w')
    assert sorted(losses) == [1, 2] and all(torch.isfinite(torch.tensor(list(losses.values()))))


def test_amp_picks_fp16_amp_optim_wrapper_on_gpu():
    from densevit.engine.amp_optim_wrapper import amp_optim_wrapper
    cfg = amp_optim_wrapper(dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=1)), cuda=True)
    assert cfg['type'] == 'AmpOptimWrapper' and cfg['loss_scale'] == 'dynamic'


def test_gradient_accumulation_equals_one_larger_batch():
    """accumulative_counts=2 over two batches of 1 == one step on the batch of 2 (a model
    without batch-dependent layers, mean loss); also through the bf16 CPU wrapper."""
    torch.manual_seed(0)
    x, y = torch.randn(2, 4), torch.randn(2, 1)
    with DefaultScope.overwrite_default_scope('densevit'):
        for wrapper_type, tol in (('OptimWrapper', 1e-6), ('CPUAmpOptimWrapper', 2e-2)):
            models = [nn.Linear(4, 1), nn.Linear(4, 1)]
            models[1].load_state_dict(models[0].state_dict())
            before = models[0].weight.detach().clone()
            accumulated, whole = (build_optim_wrapper(m, dict(
                type=wrapper_type, optimizer=dict(type='SGD', lr=0.1), accumulative_counts=n))
                for m, n in zip(models, (2, 1), strict=True))
            accumulated.initialize_count_status(models[0], 0, 2)
            for i in range(2):
                with accumulated.optim_context(models[0]):
                    loss = nn.functional.mse_loss(models[0](x[i:i + 1]).float(), y[i:i + 1])
                accumulated.update_params(loss)
            with whole.optim_context(models[1]):
                loss = nn.functional.mse_loss(models[1](x).float(), y)
            whole.update_params(loss)
            assert not torch.allclose(models[0].weight, before)  # the accumulated step happened
            for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol)


EMA = """
custom_imports = dict(imports=['probe_hooks'], allow_failed_imports=False)
custom_hooks = [dict(type='NonFiniteLossHook'),
                dict(type='EMAHook', ema_type='ExponentialMovingAverage', momentum=0.5),
                dict(type='ValParamsProbeHook')]
"""


def test_ema_weights_are_kept_and_used_for_validation(train_tool, tmp_path):
    config = write_config(tmp_path, extra=EMA)
    with isolated():
        assert train_tool.main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                                *unique_names()]) == 0
    work = tmp_path / 'w'
    ckpt = torch.load(work / 'iter_4.pth', map_location='cpu', weights_only=True)
    raw = torch.load(work / 'train_params.pth', map_location='cpu', weights_only=True)
    at_val = torch.load(work / 'val_params.pth', map_location='cpu', weights_only=True)
    # mmengine's EMAHook: 'state_dict' holds the averaged weights, 'ema_state_dict' the raw
    ema = ckpt['state_dict']
    assert {'module.' + k for k in raw} <= set(ckpt['ema_state_dict'])
    key = 'bbox_head.class_embed.weight'
    assert not torch.allclose(ema[key], raw[key])  # averaging changed the weights
    torch.testing.assert_close(ckpt['ema_state_dict']['module.' + key], raw[key])
    for k in raw:
        torch.testing.assert_close(at_val[k], ema[k], msg=k)  # validation ran on the average


def test_tensorboard_logs_training_scalars(train_tool, tmp_path):
    pytest.importorskip('tensorboard')
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    config = write_config(tmp_path)
    with isolated():
        assert train_tool.main([config, '--tensorboard', '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', 'train_cfg.max_iters=2',
                                'train_cfg.val_begin=100', *unique_names()]) == 0
    (events,) = Path(tmp_path / 'w').glob('*/vis_data/**/events.out.tfevents.*')
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    assert 'loss' in acc.Tags()['scalars']
    assert [e.step for e in acc.Scalars('loss')] == [1, 2]
    logged = train_losses(tmp_path / 'w')
    assert acc.Scalars('loss')[0].value == pytest.approx(logged[1], rel=1e-6)


def test_seeded_deterministic_runs_repeat_exactly(train_tool, tmp_path):
    options = ['randomness.seed=1', 'randomness.deterministic=True', 'train_cfg.val_begin=100']
    config = write_config(tmp_path)
    for name in ('a', 'b'):
        with isolated():
            assert train_tool.main([config, '--work-dir', str(tmp_path / name), '--cfg-options',
                                    *options, *unique_names()]) == 0
    a, b = train_losses(tmp_path / 'a'), train_losses(tmp_path / 'b')
    assert sorted(a) == [1, 2, 3, 4] and a == b
    wa, wb = (torch.load(tmp_path / n / 'iter_4.pth', weights_only=True)['state_dict']
              for n in ('a', 'b'))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
