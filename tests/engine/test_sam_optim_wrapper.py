"""SAMOptimWrapper (densevit/engine/sam_optim_wrapper.py): one wrapped step equals the
two-step SAM / ASAM update computed by hand; clipping, bf16 CPU autocast, refusals, and
two training iterations of tools/train.py with two forward passes each."""
import copy

import pytest
import torch
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper, build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from torch import nn

import densevit  # noqa: F401  (allow-list for checkpoints)
from densevit.engine.amp_optim_wrapper import amp_optim_wrapper
from densevit.engine.sam_optim_wrapper import SAMOptimWrapper

from tiny_run import isolated, load_tool, train_losses, unique_names, write_config, write_seg_config

RHO = 0.05


class TinyRegressor(BaseModel):
    """nn.Linear + MSE behind mmengine's BaseModel.train_step (as densevit's models)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, inputs, targets=None, mode='tensor'):
        out = self.linear(inputs)
        if mode == 'loss':
            return dict(loss=nn.functional.mse_loss(out.float(), targets))
        return out


def batch():
    torch.manual_seed(0)
    return dict(inputs=torch.randn(6, 4), targets=torch.randn(6, 2))


def grads_at(model, params, data):
    """Gradient of the MSE at ``params`` (a list of tensors), on a copy of the model."""
    probe = copy.deepcopy(model)
    with torch.no_grad():
        for p, value in zip(probe.parameters(), params, strict=True):
            p.copy_(value)
    loss = probe(data['inputs'], data['targets'], mode='loss')['loss']
    return torch.autograd.grad(loss, list(probe.parameters()))


def sam_by_hand(model, data, adaptive=False, clip=None):
    """The second gradient g2 (clipped if asked) the base optimizer must step with."""
    w = [p.detach().clone() for p in model.parameters()]
    g1 = grads_at(model, w, data)
    scaled = [p.abs() * g for p, g in zip(w, g1, strict=True)] if adaptive else list(g1)
    norm = torch.sqrt(sum((s ** 2).sum() for s in scaled))
    if adaptive:
        e = [RHO * p.abs() * s / norm for p, s in zip(w, scaled, strict=True)]
    else:
        e = [RHO * g / norm for g in g1]
    g2 = list(grads_at(model, [p + d for p, d in zip(w, e, strict=True)], data))
    if clip is not None:
        total = torch.sqrt(sum((g ** 2).sum() for g in g2))
        g2 = [g * min(1.0, clip / (float(total) + 1e-6)) for g in g2]
    return g2


def expected_step(model, g2, optimizer_cfg):
    """The base optimizer's step with gradient g2, on a copy of the model."""
    reference = copy.deepcopy(model)
    optimizer = getattr(torch.optim, optimizer_cfg['type'])(
        reference.parameters(), **{k: v for k, v in optimizer_cfg.items() if k != 'type'})
    for p, g in zip(reference.parameters(), g2, strict=True):
        p.grad = g.clone()
    optimizer.step()
    return list(reference.parameters())


def build(model, **cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return build_optim_wrapper(model, dict(cfg))


OPTIMIZERS = [dict(type='SGD', lr=0.5),
              dict(type='SGD', lr=0.5, momentum=0.9, weight_decay=0.01),
              dict(type='AdamW', lr=0.1, weight_decay=0.05)]


@pytest.mark.parametrize('optimizer', OPTIMIZERS, ids=lambda o: o['type'])
@pytest.mark.parametrize('adaptive', [False, True], ids=['sam', 'asam'])
@pytest.mark.parametrize('clip', [None, 0.05], ids=['noclip', 'clip'])
def test_one_step_equals_hand_computed_sam(optimizer, adaptive, clip):
    torch.manual_seed(1)
    model, data = TinyRegressor(), batch()
    expected = expected_step(model, sam_by_hand(model, data, adaptive, clip), optimizer)
    before = [p.detach().clone() for p in model.parameters()]
    extra = dict(clip_grad=dict(max_norm=clip)) if clip else {}
    wrapper = build(model, type='SAMOptimWrapper', rho=RHO, adaptive=adaptive,
                    optimizer=dict(optimizer), **extra)
    assert isinstance(wrapper, SAMOptimWrapper)
    model.train_step(copy.deepcopy(data), wrapper)
    for got, want, old in zip(model.parameters(), expected, before, strict=True):
        assert not torch.equal(got, old)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_sam_differs_from_a_plain_step():
    """The perturbation matters: the same step without SAM lands elsewhere."""
    torch.manual_seed(1)
    model, data = TinyRegressor(), batch()
    plain = copy.deepcopy(model)
    model.train_step(copy.deepcopy(data), build(
        model, type='SAMOptimWrapper', rho=0.5, optimizer=dict(type='SGD', lr=0.5)))
    plain.train_step(copy.deepcopy(data), build(
        plain, type='OptimWrapper', optimizer=dict(type='SGD', lr=0.5)))
    assert not torch.allclose(model.linear.weight, plain.linear.weight, atol=1e-4)


def test_bf16_cpu_autocast_is_finite_and_close_to_fp32():
    torch.manual_seed(1)
    model, data = TinyRegressor(), batch()
    bf16 = copy.deepcopy(model)
    model.train_step(copy.deepcopy(data), build(
        model, type='SAMOptimWrapper', rho=RHO, optimizer=dict(type='SGD', lr=0.5)))
    cfg = amp_optim_wrapper(dict(type='SAMOptimWrapper', rho=RHO,
                                 optimizer=dict(type='SGD', lr=0.5)), cuda=False)
    assert cfg['type'] == 'SAMCPUAmpOptimWrapper'
    wrapper = build(bf16, **cfg)
    dtypes = []
    bf16.linear.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    bf16.train_step(copy.deepcopy(data), wrapper)
    assert dtypes == [torch.bfloat16] * 2  # both passes autocast
    for got, want in zip(bf16.parameters(), model.parameters(), strict=True):
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_amp_with_sam_on_gpu_is_refused():
    with pytest.raises(ValueError, match='SAMOptimWrapper on GPU'):
        amp_optim_wrapper(dict(type='SAMOptimWrapper', optimizer=dict(type='SGD', lr=1)),
                          cuda=True)


@pytest.mark.parametrize('rho', [0, 0.0, -0.1, None, True])
def test_rho_must_be_positive(rho):
    with pytest.raises(ValueError, match='rho must be a number > 0'):
        build(TinyRegressor(), type='SAMOptimWrapper', rho=rho, optimizer=dict(type='SGD', lr=1))


def test_negative_eta_is_refused():
    with pytest.raises(ValueError, match='eta'):
        build(TinyRegressor(), type='SAMOptimWrapper', adaptive=True, eta=-1,
              optimizer=dict(type='SGD', lr=1))


def test_accumulation_is_refused():
    with pytest.raises(ValueError, match='accumulative_counts=2'):
        build(TinyRegressor(), type='SAMOptimWrapper', accumulative_counts=2,
              optimizer=dict(type='SGD', lr=1))


def test_something_not_a_torch_optimizer_is_refused():
    model = TinyRegressor()
    inner = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1))
    with pytest.raises(TypeError, match='torch.optim.Optimizer'):
        SAMOptimWrapper(optimizer=inner)


def test_loss_computed_outside_optim_context_is_refused():
    model, data = TinyRegressor(), batch()
    wrapper = build(model, type='SAMOptimWrapper', optimizer=dict(type='SGD', lr=1))
    loss = model(data['inputs'], data['targets'], mode='loss')['loss']
    with pytest.raises(RuntimeError, match='second forward pass'):
        wrapper.update_params(loss)


SAM_CONFIG = "\noptim_wrapper = dict(type='SAMOptimWrapper', rho=0.05)\n"


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


@pytest.mark.parametrize('kind,amp', [('detector', False), ('segmentor', False),
                                      pytest.param('detector', True, marks=pytest.mark.skipif(
                                          torch.cuda.is_available(),
                                          reason='--amp with SAM is refused on GPU'))])
def test_train_tool_runs_two_sam_iterations(train_tool, tmp_path, kind, amp):
    """tools/train.py, 2 iterations: each makes two training forward passes, the
    quickstart's optimizer and clip_grad kept, losses finite; ``--amp`` on CPU gives
    the bf16 SAM wrapper."""
    writer = write_config if kind == 'detector' else write_seg_config
    config = writer(tmp_path, extra=SAM_CONFIG)
    args = train_tool.parse_args([config, '--work-dir', str(tmp_path / 'w'),
                                  *(['--amp'] if amp else []), '--cfg-options',
                                  'train_cfg.max_iters=2', 'train_cfg.val_begin=100',
                                  *unique_names()])
    with isolated():
        cfg = train_tool.build_config(args)
        runner = Runner.from_cfg(cfg)
        forwards = []
        runner.model.register_forward_hook(
            lambda m, args, kwargs, out: forwards.append(kwargs.get('mode')) if m.training
            else None, with_kwargs=True)
        runner.train()
        assert type(runner.optim_wrapper).__name__ == (
            'SAMCPUAmpOptimWrapper' if amp else 'SAMOptimWrapper')
        assert runner.optim_wrapper.rho == 0.05
        if kind == 'detector':  # the quickstart's clip_grad, applied to the second gradient
            assert runner.optim_wrapper.clip_grad_kwargs['max_norm'] == 0.1
        assert forwards == ['loss'] * 4
        losses = train_losses(tmp_path / 'w')
        assert sorted(losses) == [1, 2]
        assert all(torch.isfinite(torch.tensor(list(losses.values()))))
