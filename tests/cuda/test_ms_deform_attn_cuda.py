"""Multi-scale deformable attention: CUDA against CPU in fp32, and under fp16 autocast.

``cpu64-cpu32`` and ``cpu-autocast`` (bf16) run the same code on CPU.
"""
import pytest
import torch
from torch import nn

from densevit.models.layers.ms_deform_attn import (
    MultiScaleDeformableAttention,
    multi_scale_deformable_attn,
)

from device_compare import assert_same, forward_backward, needs_cuda

SHAPES = ((8, 10), (4, 5), (2, 3))
PAIRS = [pytest.param((('cpu', torch.float64), ('cpu', torch.float32)), id='cpu64-cpu32'),
         pytest.param((('cpu', torch.float32), ('cuda', torch.float32)), id='cpu-cuda',
                      marks=needs_cuda)]


class Leaves(nn.Module):
    """The core function's float inputs as parameters, so that their gradients compare."""

    def __init__(self, B=2, Q=7, M=2, Dh=4, P=3):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        S, L = sum(h * w for h, w in SHAPES), len(SHAPES)
        self.value = nn.Parameter(torch.randn(B, S, M, Dh, generator=g))
        # some locations outside [0, 1]: zero padding
        self.loc = nn.Parameter(torch.rand(B, Q, M, L, P, 2, generator=g) * 1.4 - 0.2)
        w = torch.rand(B, Q, M, L * P, generator=g).softmax(-1).view(B, Q, M, L, P)
        self.weights = nn.Parameter(w)


@pytest.mark.parametrize('pair', PAIRS)
def test_core_function_fp32(pair):
    (ref_dev, ref_dtype), (dev, dtype) = pair

    def run(m, shapes):
        return multi_scale_deformable_attn(m.value, shapes, m.loc, m.weights)

    shapes = torch.tensor(SHAPES)  # moved with the inputs, as the model keeps it
    ref = forward_backward(Leaves(), run, ref_dev, ref_dtype, inputs=(shapes,))
    got = forward_backward(Leaves(), run, dev, dtype, inputs=(shapes,))
    assert ref[1].keys() == {'value', 'loc', 'weights'}
    assert_same(ref[0], got[0], what='outputs')
    assert_same(ref[1], got[1], what='gradients')


# bf16 keeps 8 significant bits, fp16 11: tolerances 8x apart (bf16 errors seen: <= 4e-2)
AUTOCAST = [pytest.param(('cpu', torch.bfloat16, 1e-1), id='cpu-autocast-bf16'),
            pytest.param(('cuda', torch.float16, 2e-2), id='cuda-autocast-fp16',
                         marks=needs_cuda)]


@pytest.mark.parametrize('case', AUTOCAST)
def test_module_under_autocast(case):
    device, dtype, tol = case
    torch.manual_seed(0)
    attn = MultiScaleDeformableAttention(embed_dims=32, num_heads=4, num_levels=3, num_points=4)
    with torch.no_grad():  # off the initial ring of whole-pixel offsets (gradient kinks)
        attn.sampling_offsets.weight.normal_(0, 0.02)
        attn.sampling_offsets.bias.add_(torch.rand(attn.sampling_offsets.bias.shape) - 0.5)
        attn.attention_weights.weight.normal_(0, 0.02)
    g = torch.Generator().manual_seed(1)
    S = sum(h * w for h, w in SHAPES)
    query, value = torch.randn(2, 9, 32, generator=g), torch.randn(2, S, 32, generator=g)
    ref_points = torch.rand(2, 9, 3, 2, generator=g)
    pad = torch.zeros(2, S, dtype=torch.bool)
    pad[1, 70:80] = True  # padding inside level 0 of image 1

    def run(m, q, r, v, shapes, mask, amp=False):
        with torch.autocast(device, dtype=dtype, enabled=amp):
            return m(q, r, v, shapes, mask)

    inputs = (query, ref_points, value, torch.tensor(SHAPES), pad)
    ref = forward_backward(attn, run, 'cpu', inputs=inputs)
    got = forward_backward(attn, lambda *a: run(*a, amp=True), device, inputs=inputs)
    assert got[0]['out'].dtype == dtype  # the output projection ran in low precision
    assert_same(ref[0], got[0], rtol=tol, atol=tol, what=f'{dtype} outputs')
    # The offsets' gradient is the bilinear weights' slope, which jumps where a point
    # crosses a pixel row or column: low-precision offsets move some points across,
    # so that gradient is compared as a whole (direction), the others elementwise.
    offsets = [k for k in ref[1] if k.startswith('sampling_offsets.')]
    for k in offsets:
        a, b = ref[1].pop(k).flatten().double(), got[1].pop(k).flatten().double()
        assert torch.isfinite(b).all(), k
        assert torch.nn.functional.cosine_similarity(a, b, dim=0) > 0.98, k
    assert len(offsets) == 2 and len(ref[1]) == 6
    assert_same(ref[1], got[1], rtol=tol, atol=tol, what=f'{dtype} gradients')
