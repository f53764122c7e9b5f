"""Multi-scale deformable attention against an independent per-point bilinear reference."""
import math

import pytest
import torch

from densevit.models.layers.ms_deform_attn import (
    MultiScaleDeformableAttention,
    multi_scale_deformable_attn,
)


def _bilinear_zero_pad(img, x, y):
    """img [C, H, W]; (x, y) scalar tensors in [0, 1] of the image (pixel centres at
    (i + 0.5) / W) -> [C], differentiable in img, x and y."""
    C, H, W = img.shape
    px, py = x * W - 0.5, y * H - 0.5  # pixel coordinates, centre of pixel i at i
    x0, y0 = math.floor(px.item()), math.floor(py.item())
    out = img.new_zeros(C)
    for yy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
        for xx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
            if 0 <= yy < H and 0 <= xx < W:  # zero padding outside
                out = out + img[:, yy, xx] * (wx * wy)
    return out


def _reference(value, shapes, locations, weights):
    """Explicit loops over batch, query, head, level and point."""
    B, S, M, Dh = value.shape
    _, Q, _, L, P, _ = locations.shape
    out = value.new_zeros(B, Q, M, Dh)
    starts = [0]
    for h, w in shapes:
        starts.append(starts[-1] + h * w)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                for lvl, (h, w) in enumerate(shapes):
                    img = value[b, starts[lvl]:starts[lvl + 1], m].t().reshape(Dh, h, w)
                    for p in range(P):
                        x, y = locations[b, q, m, lvl, p]
                        out[b, q, m] += weights[b, q, m, lvl, p] * _bilinear_zero_pad(img, x, y)
    return out.flatten(2)


def _case(dtype=torch.float32, B=2, Q=3, M=2, Dh=3, P=2, shapes=((4, 5), (2, 3), (1, 1))):
    g = torch.Generator().manual_seed(0)
    S = sum(h * w for h, w in shapes)
    L = len(shapes)
    value = torch.randn(B, S, M, Dh, generator=g, dtype=dtype)
    # some locations outside [0, 1] to exercise the zero padding
    loc = torch.rand(B, Q, M, L, P, 2, generator=g, dtype=dtype) * 1.4 - 0.2
    w = torch.rand(B, Q, M, L * P, generator=g, dtype=dtype).softmax(-1).view(B, Q, M, L, P)
    return value, torch.tensor(shapes), loc, w


def test_forward_matches_per_point_reference():
    """Both layouts of the samples: points-major without autograd, query-major with it."""
    value, shapes, loc, w = _case()
    ref = _reference(value, shapes.tolist(), loc, w)
    with torch.no_grad():
        inference = multi_scale_deformable_attn(value, shapes, loc, w)
    training = multi_scale_deformable_attn(value.clone().requires_grad_(), shapes, loc, w)
    for ours in (inference, training):
        assert ours.shape == (2, 3, 6)
        assert (ours - ref).abs().max() <= 1e-5
    assert torch.equal(inference, training)  # the same sums in the same order


@pytest.mark.parametrize('layout', [None, 'points', 'queries'])
def test_gradients_match_reference(layout):
    """The default (query-major under autograd) and either layout asked for by name."""
    value, shapes, loc, w = _case(torch.float64, B=1, Q=2)
    leaves = [t.clone().requires_grad_() for t in (value, loc, w)]
    ref_leaves = [t.clone().requires_grad_() for t in (value, loc, w)]
    g = torch.randn(1, 2, 6, dtype=torch.float64)
    out = multi_scale_deformable_attn(leaves[0], shapes, leaves[1], leaves[2], layout=layout)
    (out * g).sum().backward()
    (_reference(ref_leaves[0], shapes.tolist(), ref_leaves[1], ref_leaves[2]) * g).sum().backward()
    for a, b in zip(leaves, ref_leaves, strict=True):
        assert (a.grad - b.grad).abs().max() <= 1e-8


def test_an_unknown_layout_is_refused():
    value, shapes, loc, w = _case()
    with pytest.raises(ValueError, match="layout must be 'points', 'queries' or None"):
        multi_scale_deformable_attn(value, shapes, loc, w, layout='point')


def test_gradcheck_double():
    value, shapes, loc, w = _case(torch.float64, B=1, Q=2, M=1, Dh=2, shapes=((3, 4), (2, 2)))
    inputs = tuple(t.requires_grad_() for t in (value, loc, w))
    assert torch.autograd.gradcheck(
        lambda v, lo, wt: multi_scale_deformable_attn(v, shapes, lo, wt), inputs, eps=1e-6,
        atol=1e-5)


def test_module_shapes_init_and_padding():
    attn = MultiScaleDeformableAttention(embed_dims=16, num_heads=4, num_levels=2, num_points=3)
    # initial offsets: head m along angle 2*pi*m/M on the unit square, point p at p+1
    b = attn.sampling_offsets.bias.view(4, 2, 3, 2)
    assert torch.allclose(b[0, 0, :, 0], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.allclose(b[1, 1, 2], torch.tensor([0.0, 3.0]), atol=1e-6)
    shapes = torch.tensor([[4, 4], [2, 2]])
    q, v = torch.randn(2, 5, 16), torch.randn(2, 20, 16)
    pad = torch.zeros(2, 20, dtype=torch.bool)
    pad[1, 10:] = True
    for ref in (torch.rand(2, 5, 2, 2), torch.rand(2, 5, 2, 4)):
        out = attn(q, ref, v, shapes, pad)
        assert out.shape == (2, 5, 16)
    # padded values are zeroed: changing them does not change the output
    v2 = v.clone()
    v2[1, 10:] = 100.0
    ref = torch.rand(2, 5, 2, 2)
    assert torch.allclose(attn(q, ref, v, shapes, pad), attn(q, ref, v2, shapes, pad))
