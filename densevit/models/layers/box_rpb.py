"""Box-to-pixel relative position bias, BoxRPB (Plain-DETR: Lin et al. 2023, §3.2).

Global cross-attention lets every query look at every pixel of the single-scale map;
BoxRPB tells each head where the query's box lies. For a query box (x1, y1, x2, y2)
and a pixel centre (px, py), both in input pixels, the offsets are decomposed per axis:

    B_x[q, j, :] = MLP_x([x1 − px_j, x2 − px_j])   [heads]   for every column j
    B_y[q, i, :] = MLP_y([y1 − py_i, y2 − py_i])   [heads]   for every row i
    B[q, (i, j), h] = B_x[q, j, h] + B_y[q, i, h]

so the cost is two small MLPs over (W + H) offsets per query instead of one over
H·W. ``mode='log8'`` compresses the offsets as ``sign(d)·log2(|d| + 1) / 3`` (the
paper's best); ``'linear'`` uses them in pixels.
"""
import math

import torch
from torch import nn


def box_pixel_offsets(boxes, size, stride, mode='log8'):
    """boxes [B, Q, 4] cxcywh in [0, 1] of the feature map, size = (H, W) cells ->
    (dx [B, Q, W, 2], dy [B, Q, H, 2]): each box edge minus each cell centre, in pixels
    (a cell is ``stride`` pixels), compressed by ``mode``."""
    H, W = size
    cx, cy, w, h = boxes.unbind(-1)
    xs = torch.stack([cx - w / 2, cx + w / 2], -1) * (W * stride)  # [B, Q, 2]
    ys = torch.stack([cy - h / 2, cy + h / 2], -1) * (H * stride)
    px = (torch.arange(W, device=boxes.device, dtype=boxes.dtype) + 0.5) * stride
    py = (torch.arange(H, device=boxes.device, dtype=boxes.dtype) + 0.5) * stride
    dx = xs[:, :, None, :] - px[None, None, :, None]
    dy = ys[:, :, None, :] - py[None, None, :, None]
    if mode == 'log8':
        dx = dx.sign() * torch.log2(dx.abs() + 1.0) / math.log2(8)
        dy = dy.sign() * torch.log2(dy.abs() + 1.0) / math.log2(8)
    elif mode != 'linear':
        raise ValueError(f"BoxRPB mode must be 'log8' or 'linear', got {mode!r}")
    return dx, dy


class BoxRelativePositionBias(nn.Module):
    """Per-head attention bias of each query's box over every pixel of one map.

    Args:
        num_heads (int): attention heads.
        hidden_dims (int): width of the two offset MLPs (Plain-DETR: 512).
        stride (int): input pixels per feature cell.
        mode (str): ``'log8'`` or ``'linear'`` (see the module docstring).
        local_init (float): 0 (default) keeps PyTorch's initialisation, which starts
            near a uniform bias: attention global at first. ``a > 0`` starts each head
            local instead: two hidden units of each MLP are set to ``relu(x1 - px)`` and
            ``relu(px - x2)`` (how far, in compressed offsets, a pixel lies left / right
            of the box; above / below for y) and weighted ``-a`` in every head, so the
            bias is 0 inside the box and falls with the distance outside it, as
            deformable attention starts with its samples around the reference. The
            other units start as usual; everything stays learned.
        local_pattern (str): where each head starts looking with ``local_init``:
            ``'inside'`` (every head: the whole box) or ``'corners'``: heads in turn look
            at the box, near its top-left corner, bottom-right, top-right, bottom-left,
            left edge, right edge, top edge, bottom edge (then again), as deformable
            attention starts its heads' samples in different directions. Near an edge
            ``e`` the bias is ``-a·|e − p|`` along that axis (four hidden units per axis:
            ``relu(±(x1 − p))``, ``relu(±(x2 − p))``).
    """

    # a head's start per axis, as weights of the units (relu(e1-p), relu(p-e1), relu(e2-p),
    # relu(p-e2)): inside the box, near its first edge (left / top), near its second
    _AXIS = {'in': (1.0, 0.0, 0.0, 1.0), 'e1': (1.0, 1.0, 0.0, 0.0), 'e2': (0.0, 0.0, 1.0, 1.0)}
    # (x, y) per head, in turn: box, corners (TL, BR, TR, BL), edges (L, R, T, B)
    _CORNERS = (('in', 'in'), ('e1', 'e1'), ('e2', 'e2'), ('e2', 'e1'), ('e1', 'e2'),
                ('e1', 'in'), ('e2', 'in'), ('in', 'e1'), ('in', 'e2'))

    def __init__(self, num_heads, hidden_dims=512, stride=16, mode='log8', local_init=0.0,
                 local_pattern='inside'):
        super().__init__()
        if mode not in ('log8', 'linear'):
            raise ValueError(f"BoxRPB mode must be 'log8' or 'linear', got {mode!r}")
        if local_pattern not in ('inside', 'corners'):
            raise ValueError(f"BoxRPB local_pattern must be 'inside' or 'corners', got "
                             f'{local_pattern!r}')
        units = 2 if local_pattern == 'inside' else 4
        if local_init < 0 or (local_init and hidden_dims < units):
            raise ValueError(f'BoxRPB local_init must be >= 0 with hidden_dims >= {units} '
                             f'(local_pattern={local_pattern!r}), got local_init={local_init}, '
                             f'hidden_dims={hidden_dims}')
        self.num_heads, self.stride, self.mode = num_heads, stride, mode
        self.local_init, self.local_pattern = local_init, local_pattern
        self.mlp_x = nn.Sequential(nn.Linear(2, hidden_dims), nn.ReLU(inplace=True),
                                   nn.Linear(hidden_dims, num_heads, bias=False))
        self.mlp_y = nn.Sequential(nn.Linear(2, hidden_dims), nn.ReLU(inplace=True),
                                   nn.Linear(hidden_dims, num_heads, bias=False))
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Apply ``local_init`` (see the class docstring); a no-op when it is 0."""
        if not self.local_init:
            return
        if self.local_pattern == 'inside':
            for mlp in (self.mlp_x, self.mlp_y):
                first, last = mlp[0], mlp[2]
                # inputs (e1 - p, e2 - p): unit 0 = relu(e1 - p), unit 1 = relu(p - e2)
                first.weight[:2] = torch.tensor([[1.0, 0.0], [0.0, -1.0]])
                first.bias[:2] = 0.0
                last.weight[:, :2] = -self.local_init
            return
        for axis, mlp in enumerate((self.mlp_x, self.mlp_y)):
            first, last = mlp[0], mlp[2]
            first.weight[:4] = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
            first.bias[:4] = 0.0
            for h in range(self.num_heads):
                start = self._AXIS[self._CORNERS[h % len(self._CORNERS)][axis]]
                last.weight[h, :4] = -self.local_init * torch.tensor(start)

    def forward(self, boxes, size):
        """boxes [B, Q, 4] cxcywh in [0, 1] of the (padded) map, size (H, W) ->
        bias [B, heads, Q, H·W] (row-major pixels, as ``flatten(2)`` of the map)."""
        dx, dy = box_pixel_offsets(boxes, size, self.stride, self.mode)
        bx = offset_mlp(self.mlp_x, dx).permute(0, 3, 1, 2)  # [B, heads, Q, W]
        by = offset_mlp(self.mlp_y, dy).permute(0, 3, 1, 2)  # [B, heads, Q, H]
        bias = by[..., :, None] + bx[..., None, :]  # [B, heads, Q, H, W]
        return bias.flatten(3)


def offset_mlp(mlp, offsets):
    """``mlp`` (Linear, ReLU, Linear without bias) of offsets [..., 2] -> [..., heads]:
    ``mlp(offsets)`` to the last bit. In training (gradients on, no autocast) through
    :class:`_OffsetMLP`, whose backward is written by hand; else ``mlp`` itself."""
    first, last = mlp[0], mlp[2]
    if not (torch.is_grad_enabled() and first.weight.requires_grad) or \
            torch.is_autocast_enabled(offsets.device.type):
        return mlp(offsets)
    out = _OffsetMLP.apply(offsets.reshape(-1, 2), first.weight, first.bias, last.weight)
    return out.view(*offsets.shape[:-1], -1)


class _OffsetMLP(torch.autograd.Function):
    """``relu(x W1ᵀ + b1) W2ᵀ`` for x [N, 2] (N = B·Q·W cells, hidden [N, C]), the same
    kernels as autograd runs through ``nn.Linear`` and ``nn.ReLU`` -- so the same numbers --
    without autograd's extra copies and buffers of the [N, C] hidden layer: the hidden layer
    is kept once, its gradient made in one buffer. The step time it saves in the DETR-on-ViT
    quickstart: ``benchmarks/bench_box_rpb.py``."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2):
        hidden = torch.addmm(b1, x, w1.t()).relu_()  # [N, C]
        ctx.save_for_backward(x, w1, hidden, w2)
        return hidden @ w2.t()  # [N, heads]

    @staticmethod
    def backward(ctx, grad):
        x, w1, hidden, w2 = ctx.saved_tensors
        grad_hidden = torch.ops.aten.threshold_backward(grad @ w2, hidden, 0)  # [N, C]
        grad_x = grad_hidden @ w1 if ctx.needs_input_grad[0] else None
        return grad_x, grad_hidden.t() @ x, grad_hidden.sum(0), grad.t() @ hidden
