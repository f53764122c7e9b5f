"""FLOPs and parameters of a model: ``python tools/analysis/get_flops.py CONFIG --shape H W``.

Counted by mmengine's jit tracer (fvcore's ``FlopAnalyzer``) on one forward pass: a
detector's or segmentor's ``mode='tensor'`` forward (backbone, neck and head, no pre- or
post-processing), or a bare backbone's ``forward(x)`` (``configs/analysis/vit-b16_224.py``).
The tracer records every aten op the forward runs, whatever module or function calls
it: a convolution folded with its norm (``models/layers/conv_norm.py``: ``F.conv2d`` with
the scaled weight) counts as the convolution it is, with no norm left to count.

Conventions (fvcore's, the papers' "GFLOPs"): one fused multiply-add is one FLOP (so the
figure is multiply-accumulates, bias not counted); a BatchNorm at inference counts 2 per
element, a LayerNorm / GroupNorm 5, a bilinear upsampling 4 per output element;
element-wise additions, activations and softmax count nothing.
``F.scaled_dot_product_attention`` is counted here (QK^T and attention x V); mmengine has
no handle for it and would skip it. (torch's ``FlopCounterMode`` is no substitute: it
counts 2 per multiply-add, no norms, and 0 for attention where SDPA runs its CPU kernel,
``_scaled_dot_product_flash_attention_for_cpu``, as in DETR's ``nn.MultiheadAttention``.)

What is counted is what the forward runs. A head that computes its function in a cheaper
order counts its cheaper cost: densevit's ``SegformerHead`` applies the fuse convolution
per map at each map's own size (a ``matmul``, 1.43 G at 512 x 512 for B0), so
SegFormer-B0 counts 5.62 G where the paper's upsample-concatenate-fuse form (the fuse on
1024 channels at 128 x 128: 4.29 G), counted the same way, is 8.49 G (the paper's 8.4 G).
``--by-operator`` shows the split by op; tests/tools/test_get_flops.py checks these
counts against counts written out by hand. ``--json FILE`` writes the counts (also per op
and per top-level module: backbone, neck, head) with the command, commit and machine
(``densevit.utils.provenance``).
"""
import argparse
import inspect
import sys

import torch
from mmengine.analysis import ActivationAnalyzer, FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape
from mmengine.analysis.print_helper import complexity_stats_table
from mmengine.config import DictAction
from torch import nn

from densevit.apis import init_model
from densevit.utils.provenance import add_json_argument, write_result


def sdpa_flop_jit(inputs, outputs):
    """q [..., L, E], k [..., S, E], v [..., S, Ev] -> L*S*E + L*S*Ev per batch-head."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    batch = 1
    for d in q[:-2]:
        batch *= d
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


def _takes_mode(model):
    """Whether ``model.forward`` has a ``mode`` argument (mmengine's ``BaseModel``)."""
    try:
        return 'mode' in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


class TensorMode(nn.Module):
    """``model(x, mode='tensor')`` (a bare backbone: ``model(x)``) as a plain ``forward(x)``
    for the tracer."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.kwargs = {'mode': 'tensor'} if _takes_mode(model) else {}

    def forward(self, x):
        return self.model(x, **self.kwargs)


def format_count(n):
    """1234567 -> '1.235M', as mmengine's tables write counts."""
    for unit, size in (('T', 1e12), ('G', 1e9), ('M', 1e6), ('K', 1e3)):
        if abs(n) >= size:
            return f'{n / size:.4g}{unit}'
    return str(n)


def complexity(model, shape, batch=1, table=True):
    """Counts of one forward pass on a ``[batch, 3, *shape]`` input.

    Returns:
        dict: ``flops`` (multiply-accumulates, see the module docstring), ``params``,
        their ``*_str`` forms, ``by_operator`` (FLOPs per op: ``conv``, ``linear``,
        ``matmul``, ``scaled_dot_product_attention``, ``batch_norm``...), ``by_module``
        (FLOPs per child of the model: ``backbone``, ``neck``, ``decode_head``...; what the
        model's own forward runs outside them, such as DETR's mask resize, is in the total
        only) and, with ``table`` (a second traced forward), ``activations`` and
        ``out_table`` (per module).
    """
    wrapped = TensorMode(model)
    x = torch.randn(batch, 3, *shape, device=next(model.parameters()).device)
    flops = FlopAnalyzer(wrapped, (x,))
    flops.set_op_handle('aten::scaled_dot_product_attention', sdpa_flop_jit)
    with torch.no_grad():  # the analyzers trace lazily, on the first query
        info = dict(flops=flops.total(), by_operator=dict(flops.by_operator()),
                    by_module={name.removeprefix('model.'): n  # the model's own children
                               for name, n in flops.by_module().items()
                               if name.startswith('model.') and name.count('.') == 1},
                    params=parameter_count(wrapped)[''])
        if table:
            activations = ActivationAnalyzer(wrapped, (x,))
            info['activations'] = activations.total()
            info['activations_str'] = format_count(info['activations'])
            info['out_table'] = '\n' + complexity_stats_table(
                flops=flops, activations=activations, show_param_shapes=True)
    info['flops_str'], info['params_str'] = format_count(info['flops']), format_count(info['params'])
    return info


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Count FLOPs (multiply-accumulates, as papers and '
                                'fvcore count them) and parameters of one forward pass')
    p.add_argument('config')
    p.add_argument('--shape', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    p.add_argument('--table', action='store_true', help='print the per-module table')
    p.add_argument('--by-operator', action='store_true', help='print the FLOPs per op')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    add_json_argument(p, 'the counts (total, per op, per top-level module)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    model = init_model(args.config, None, cfg_options=args.cfg_options)
    info = complexity(model, tuple(args.shape), table=args.table)
    if args.table:
        print(info['out_table'])
    if args.by_operator:
        for op, n in sorted(info['by_operator'].items(), key=lambda kv: -kv[1]):
            print(f'  {op:<32} {format_count(n):>9} ({n:,})')
    h, w = args.shape
    print(f'input shape: 1x3x{h}x{w}\nFLOPs: {info["flops_str"]} ({info["flops"]:,})\n'
          f'parameters: {info["params_str"]} ({info["params"]:,})')
    if args.json:
        write_result(args.json, dict(input_shape=[1, 3, h, w],
                                     **{k: v for k, v in info.items() if k != 'out_table'}),
                     config=args.config, cfg_options=dict(args.cfg_options))
    return 0


if __name__ == '__main__':
    sys.exit(main())
