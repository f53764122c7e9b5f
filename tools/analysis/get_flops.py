"""FLOPs and parameters of a model: ``python tools/analysis/get_flops.py CONFIG --shape H W``.

Counted by mmengine's jit tracer (``mmengine.analysis.get_model_complexity_info``) on
the model's ``mode='tensor'`` forward: backbone, neck and head, no pre- or
post-processing. One fused multiply-add counts as one FLOP (fvcore's convention,
the one papers' "GFLOPs" use). ``F.scaled_dot_product_attention`` is counted here
(QK^T and attention x V); mmengine has no handle for it and would skip it.
"""
import argparse
import sys

import torch
from mmengine.analysis import complexity_analysis, get_model_complexity_info
from mmengine.analysis.jit_handles import get_shape
from mmengine.config import DictAction
from torch import nn

from densevit.apis import init_model


def sdpa_flop_jit(inputs, outputs):
    """q [..., L, E], k [..., S, E], v [..., S, Ev] -> L*S*E + L*S*Ev per batch-head."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    batch = 1
    for d in q[:-2]:
        batch *= d
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


class TensorMode(nn.Module):
    """``model(x, mode='tensor')`` as a plain ``forward(x)`` for the tracer."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, mode='tensor')


def complexity(model, shape, batch=1):
    """mmengine's complexity dict (``flops``, ``params``, ``*_str``, ``out_table``)."""
    complexity_analysis._DEFAULT_SUPPORTED_FLOP_OPS.setdefault(
        'aten::scaled_dot_product_attention', sdpa_flop_jit)
    x = torch.randn(batch, 3, *shape, device=next(model.parameters()).device)
    with torch.no_grad():
        return get_model_complexity_info(TensorMode(model), inputs=(x,), show_table=True,
                                         show_arch=False)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Count FLOPs and parameters')
    p.add_argument('config')
    p.add_argument('--shape', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    p.add_argument('--table', action='store_true', help='print the per-module table')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    model = init_model(args.config, None, cfg_options=args.cfg_options)
    info = complexity(model, tuple(args.shape))
    if args.table:
        print(info['out_table'])
    h, w = args.shape
    print(f'input shape: 1x3x{h}x{w}\nFLOPs: {info["flops_str"]} ({info["flops"]:,})\n'
          f'parameters: {info["params_str"]} ({info["params"]:,})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
