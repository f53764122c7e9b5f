"""DETR's FFN: the numbers of Linear -> ReLU -> Linear by hand, and an autograd graph without
CopySlices (its in-place ReLU must not act on a view of Linear's output)."""
import torch

from densevit.models.layers.detr_transformer import FFN


def _graph_names(fn):
    seen, todo = set(), [fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return {type(n).__name__ for n in seen}


def test_ffn_is_linear_relu_linear_by_hand_with_its_gradients():
    torch.manual_seed(0)
    ffn = FFN(8, 16, dropout=0.0).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    w1, b1 = ffn.linear1.weight, ffn.linear1.bias
    w2, b2 = ffn.linear2.weight, ffn.linear2.bias
    ref = torch.clamp(x_ref @ w1.detach().T + b1.detach(), min=0) @ w2.detach().T + b2.detach()
    out = ffn(x)
    assert out.shape == (2, 5, 8)
    assert torch.allclose(out, ref, atol=1e-12)
    g = torch.randn_like(ref)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-12)


def test_ffn_backward_has_no_copy_slices():
    ffn = FFN(8, 16, dropout=0.0)
    out = ffn(torch.randn(2, 5, 8, requires_grad=True))
    names = _graph_names(out.grad_fn)
    assert 'CopySlices' not in names and any(n.startswith('Relu') or n.startswith('Threshold')
                                             for n in names), names
