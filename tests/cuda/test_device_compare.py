"""The comparison helpers of tests/tools/device_compare.py catch what they must (CPU only)."""
import torch
from mmengine.structures import InstanceData
from torch import nn

from densevit.structures import DataSample

from device_compare import flatten, forward_backward, mismatches, move, probe_loss, sum_losses


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))


def test_equal_runs_agree_and_a_changed_weight_is_named():
    x = torch.randn(5, 4)
    net = _net()
    ref = forward_backward(net, lambda m, x: m(x), 'cpu', torch.float64, inputs=(x,))
    got = forward_backward(net, lambda m, x: m(x), 'cpu', torch.float32, inputs=(x,))
    assert ref[1].keys() == {'0.weight', '0.bias', '2.weight', '2.bias'}
    assert ref[0]['out'].dtype == torch.float64 and got[0]['out'].dtype == torch.float32
    assert mismatches(*[r[0] for r in (ref, got)]) == []
    assert mismatches(ref[1], got[1]) == []
    with torch.no_grad():
        net[2].weight[0, 0] += 1e-3
    bad = forward_backward(net, lambda m, x: m(x), 'cpu', torch.float32, inputs=(x,))
    assert any(p.startswith('out:') for p in mismatches(ref[0], bad[0]))
    # the output row of the changed weight moves; through it the first layer's gradients
    assert any(p.startswith('0.weight:') for p in mismatches(ref[1], bad[1]))


def test_mismatches_names_shapes_and_non_finite_values():
    a = dict(x=torch.ones(3), y=torch.zeros(2))
    assert mismatches(a, dict(x=torch.ones(3))) == [
        "names differ: only in ref ['y'], only in got []"]
    assert 'shape (4,) != (3,)' in mismatches(a, dict(a, x=torch.ones(4)))[0]
    assert 'got has 1 non-finite' in mismatches(a, dict(a, x=torch.tensor([1, 1, float('nan')])))[0]
    assert 'ref has 1 non-finite' in mismatches(dict(a, y=torch.tensor([0, float('inf')])), a)[0]
    # tolerance: atol scales with the tensor's largest value, rtol with each element
    big = dict(x=torch.tensor([1000.0, 0.0]))
    assert mismatches(big, dict(x=torch.tensor([1000.05, 0.009]))) == []
    assert mismatches(big, dict(x=torch.tensor([1000.0, 0.011]))) != []


def test_move_casts_floats_only_and_moves_data_elements():
    ds = DataSample(metainfo=dict(img_shape=(4, 4)))
    ds.gt_instances = InstanceData(bboxes=torch.ones(1, 4), labels=torch.tensor([1]))
    x, idx, moved = move((torch.ones(2), torch.arange(2), [ds]), 'cpu', torch.float64)
    assert x.dtype == torch.float64 and idx.dtype == torch.int64
    assert moved[0] is not ds and moved[0].gt_instances.bboxes.dtype == torch.float32


def test_losses_and_probe():
    losses = dict(loss_a=torch.tensor(1.5), acc=torch.tensor(9.0), d0=dict(loss_b=torch.ones(2)))
    assert float(sum_losses(losses)) == 3.5
    assert set(flatten(losses)) == {'out.loss_a', 'out.acc', 'out.d0.loss_b'}
    t = torch.ones(3, requires_grad=True)
    probe_loss([t]).backward()
    assert torch.equal(t.grad, torch.randn(3, generator=torch.Generator().manual_seed(0),
                                           dtype=torch.float64).float())
