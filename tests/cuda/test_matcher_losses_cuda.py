"""Hungarian matcher and set criterion on CUDA tensors and under fp16 autocast.

The matcher must give the CPU assignment for CUDA inputs and for low-precision
costs; the losses under autocast must be finite fp32 and close to fp32's.
``cpu`` cases run the same code on CPU (autocast bf16).
"""
import pytest
import torch

from densevit.models.losses.set_criterion import SetCriterion
from densevit.models.task_modules.hungarian_matcher import HungarianMatcher

from device_compare import needs_cuda

K = 4
AMP = [pytest.param(('cpu', torch.bfloat16), id='cpu-bf16'),
       pytest.param(('cuda', torch.float16), id='cuda-fp16', marks=needs_cuda)]


def _boxes(n, g):
    return torch.cat([torch.rand(n, 2, generator=g) * 0.6 + 0.2,
                      torch.rand(n, 2, generator=g) * 0.3 + 0.05], 1)


def _batch(seed, focal, B=3, Q=8):
    """Predictions and targets as tests/models/test_hungarian_matcher.py builds them; the
    last image has no target."""
    g = torch.Generator().manual_seed(seed)
    outputs = dict(pred_logits=torch.randn(B, Q, K if focal else K + 1, generator=g) * 2,
                   pred_boxes=_boxes(B * Q, g).view(B, Q, 4))
    targets = [dict(labels=torch.randint(0, K, (n,), generator=g), boxes=_boxes(n, g))
               for n in (3, 5, 0)]
    return outputs, targets


def _on(obj, device, dtype=None):
    if isinstance(obj, dict):
        return {k: _on(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_on(v, device, dtype) for v in obj]
    return obj.to(device, dtype) if dtype is not None and obj.is_floating_point() \
        else obj.to(device)


def _same_assignment(a, b):
    assert len(a) == len(b)
    for (ra, ca), (rb, cb) in zip(a, b, strict=True):
        assert rb.device.type == 'cpu' and rb.dtype == torch.int64
        assert torch.equal(ra, rb) and torch.equal(ca, cb)


@pytest.mark.parametrize('focal', [False, True], ids=['softmax', 'focal'])
@pytest.mark.parametrize('seed', range(3))
@needs_cuda
def test_matcher_cuda_tensors(seed, focal):
    matcher = HungarianMatcher(2, 5, 2, focal=focal)
    outputs, targets = _batch(seed, focal)
    _same_assignment(matcher(outputs, targets),
                     matcher(_on(outputs, 'cuda'), _on(targets, 'cuda')))


@pytest.mark.parametrize('amp', AMP)
@pytest.mark.parametrize('focal', [False, True], ids=['softmax', 'focal'])
@pytest.mark.parametrize('seed', range(3))
def test_matcher_low_precision_under_autocast(seed, focal, amp):
    """Low-precision predictions: the same assignment as their values in fp32 on CPU."""
    device, dtype = amp
    matcher = HungarianMatcher(2, 5, 2, focal=focal)
    outputs, targets = _batch(seed, focal)
    low = _on(outputs, device, dtype)
    with torch.autocast(device, dtype=dtype):
        got = matcher(low, _on(targets, device))
    _same_assignment(matcher(_on(low, 'cpu', torch.float32), targets), got)


@pytest.mark.parametrize('amp', AMP)
@pytest.mark.parametrize('focal', [False, True], ids=['ce', 'focal'])
def test_set_criterion_under_autocast(focal, amp):
    """Low-precision predictions from a layer under autocast: finite fp32 losses equal to
    the fp32 losses of the same values on CPU, finite gradients."""
    device, dtype = amp
    torch.manual_seed(0)
    criterion = SetCriterion(K, matcher=dict(type='HungarianMatcher', focal=focal),
                             use_focal=focal)
    head = torch.nn.Linear(16, (K if focal else K + 1) + 4).to(device)  # logits, box logits
    feats = torch.randn(3, 8, 16, device=device)
    _, targets = _batch(0, focal)
    with torch.autocast(device, dtype=dtype):
        out = head(feats)
        outputs = dict(pred_logits=out[..., :-4], pred_boxes=out[..., -4:].sigmoid())
        got = criterion.to(device)(outputs, _on(targets, device), num_boxes=8.0)
    assert outputs['pred_logits'].dtype == dtype
    sum(got.values()).backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())
    ref = criterion.to('cpu')(_on({k: v.detach() for k, v in outputs.items()}, 'cpu',
                                  torch.float32), targets, num_boxes=8.0)
    assert got.keys() == ref.keys() == {'loss_cls', 'loss_bbox', 'loss_iou'}
    for k, v in got.items():
        assert v.dtype == torch.float32 and torch.isfinite(v), k
        assert float(v.detach()) == pytest.approx(float(ref[k]), rel=1e-4, abs=1e-6), k
