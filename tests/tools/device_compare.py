"""Run one model on two devices / dtypes from the same weights and inputs, and compare.

Used by tests/cuda (CPU fp32 against CUDA fp32); tests/cuda/test_device_compare.py
runs the same helpers on CPU float64 against CPU float32, so they are exercised
on machines without a GPU too.

``DENSEVIT_TEST_DEVICE=cuda`` (tools/dev/gpu_check.sh sets it) turns a missing GPU
from a skip into a failure: see :data:`needs_cuda` and tests/cuda/conftest.py.
"""
import copy
import os

import pytest
import torch

WANT_CUDA = os.environ.get('DENSEVIT_TEST_DEVICE', '').lower() == 'cuda'
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() and not WANT_CUDA,
                                reason='needs a CUDA GPU')


def move(obj, device, dtype=None):
    """A copy of ``obj`` (tensors, dicts, lists, tuples, data elements) on ``device``;
    floating tensors also cast to ``dtype`` when given."""
    if isinstance(obj, torch.Tensor):
        out = obj.to(device)
        return out.to(dtype) if dtype is not None and out.is_floating_point() else out
    if isinstance(obj, dict):
        return {k: move(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(v, device, dtype) for v in obj)
    if hasattr(obj, 'to'):  # mmengine data elements: a new element on the device
        return copy.deepcopy(obj).to(device)
    return obj


def flatten(obj, prefix='out'):
    """{path: tensor} of every tensor in nested dicts / lists / tuples."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {}
    out = {}
    for k, v in items:
        out.update(flatten(v, f'{prefix}.{k}'))
    return out


def probe_loss(outputs, seed=0):
    """A scalar with a different weight on every output element (drawn on CPU, so the
    same on every device): its gradients reach every element's computation."""
    g = torch.Generator().manual_seed(seed)
    total = 0
    for t in flatten(outputs).values():
        if t.is_floating_point():
            w = torch.randn(t.shape, generator=g, dtype=torch.float64)
            dtype = torch.promote_types(t.dtype, torch.float32)  # fp16 sums: in fp32
            total = total + (t.to(dtype) * w.to(t.device, dtype)).sum()
    return total


def sum_losses(losses):
    """The training loss of a ``mode='loss'`` dict: the sum of its ``loss*`` entries."""
    return sum(v.sum() for k, v in flatten(losses, '').items() if 'loss' in k)


def forward_backward(model, run, device, dtype=None, loss_fn=probe_loss, inputs=()):
    """Copy ``model`` to ``device`` (and ``dtype``), call ``run(model, *inputs)`` (inputs moved
    the same way), backpropagate ``loss_fn(outputs)``.

    Returns (outputs, grads) on CPU, detached: ``grads`` maps each parameter name to its
    gradient (parameters the loss does not reach are left out).
    """
    m = copy.deepcopy(model).to(device)
    if dtype is not None:
        # parameters and saved buffers; non-persistent ones (constants such as
        # SetCriterion's class weights, position tables) keep their dtype, as under AMP
        saved = m.state_dict(keep_vars=True)
        for t in list(m.parameters()) + list(m.buffers()):
            if t.is_floating_point() and any(t is v for v in saved.values()):
                t.data = t.data.to(dtype)
    outputs = run(m, *move(inputs, device, dtype))
    loss_fn(outputs).backward()
    grads = {n: p.grad.detach().cpu() for n, p in m.named_parameters() if p.grad is not None}
    outs = {k: v.detach().cpu() for k, v in flatten(outputs).items()}
    return outs, grads


def mismatches(ref, got, rtol=1e-4, atol=1e-5):
    """Why ``got`` differs from ``ref`` ({name: tensor} each); an empty list when they agree.

    Elementwise ``|got - ref| <= atol * max(1, max|ref|) + rtol * |ref|``: the absolute
    part grows with the tensor's scale (a sum of large terms that cancels to about 0
    keeps the rounding error of the large terms). Non-finite values are mismatches.
    """
    problems = []
    if ref.keys() != got.keys():
        problems.append(f'names differ: only in ref {sorted(ref.keys() - got.keys())}, '
                        f'only in got {sorted(got.keys() - ref.keys())}')
    for k in sorted(ref.keys() & got.keys()):
        a, b = ref[k].detach().cpu().double(), got[k].detach().cpu().double()
        if a.shape != b.shape:
            problems.append(f'{k}: shape {tuple(b.shape)} != {tuple(a.shape)}')
            continue
        bad = [f'{name} has {int((~torch.isfinite(t)).sum())} non-finite values'
               for name, t in (('ref', a), ('got', b)) if not torch.isfinite(t).all()]
        if bad:
            problems.append(f'{k}: ' + ', '.join(bad))
            continue
        scale = max(1.0, float(a.abs().max())) if a.numel() else 1.0
        err = (b - a).abs() - (atol * scale + rtol * a.abs())
        if err.numel() and err.max() > 0:
            i = int(err.flatten().argmax())
            problems.append(f'{k}: max |diff| {float((b - a).abs().max()):.3g} (at flat {i}: '
                            f'{float(b.flatten()[i]):.6g} vs {float(a.flatten()[i]):.6g})')
    return problems


def assert_same(ref, got, rtol=1e-4, atol=1e-5, what=''):
    problems = mismatches(ref, got, rtol, atol)
    assert not problems, f'{what}: ' + '; '.join(problems[:10])
