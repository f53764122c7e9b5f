"""Deformable attention core, forward + backward on CPU: densevit vs HF transformers.

    OMP_NUM_THREADS=1 python tools/analysis/bench_deform_attn.py [--batch 1] [--repeats 3]

Shapes of Deformable DETR on COCO: 4 levels of an 800x1066 image (100x134, 50x67, 25x34,
13x17), d 256, 8 heads, 4 points; "encoder" = every pixel a query (S = 17,821),
"decoder" = 300 queries. Each (implementation, case) runs in its own process so that
the peak resident memory (ru_maxrss, minus the process's peak after the inputs were
made) belongs to that run alone. Times are the median of ``--repeats`` runs after one
warm-up. The reference is ``transformers.models.deformable_detr``'s pure-PyTorch
``MultiScaleDeformableAttention``.
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

SHAPES = [(100, 134), (50, 67), (25, 34), (13, 17)]
D, M, L, P = 256, 8, 4, 4


def _inputs(batch, queries):
    g = torch.Generator().manual_seed(0)
    S = sum(h * w for h, w in SHAPES)
    value = torch.randn(batch, S, M, D // M, generator=g).requires_grad_()
    loc = torch.rand(batch, queries, M, L, P, 2, generator=g).requires_grad_()
    w = torch.rand(batch, queries, M, L * P, generator=g).softmax(-1)
    w = w.view(batch, queries, M, L, P).requires_grad_()
    return value, loc, w


def _impl(name):
    shapes = torch.tensor(SHAPES)
    if name == 'densevit':
        from densevit.models.layers.ms_deform_attn import multi_scale_deformable_attn
        return lambda v, lo, w: multi_scale_deformable_attn(v, shapes, lo, w)
    from transformers.models.deformable_detr.modeling_deformable_detr import \
        MultiScaleDeformableAttention
    hf = MultiScaleDeformableAttention()
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    return lambda v, lo, w: hf(v, shapes, SHAPES, starts, lo, w, 64)


def child(name, case, batch, repeats):
    queries = sum(h * w for h, w in SHAPES) if case == 'encoder' else 300
    fn = _impl(name)
    inputs = _inputs(batch, queries)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for i in range(repeats + 1):
        for t in inputs:
            t.grad = None
        t0 = time.perf_counter()
        out = fn(*inputs)
        out.sum().backward()
        if i:
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    print(json.dumps(dict(time_s=statistics.median(times), peak_mib=peak / 1024,
                          out_shape=list(out.shape))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--child', nargs=2, metavar=('IMPL', 'CASE'), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(*args.child, args.batch, args.repeats)
    print(f'torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}')
    print(f'{"case":8} {"impl":9} {"fwd+bwd s":>10} {"peak MiB":>9}')
    for case in ('encoder', 'decoder'):
        res = {}
        for name in ('densevit', 'hf'):
            out = subprocess.run([sys.executable, __file__, '--batch', str(args.batch),
                                  '--repeats', str(args.repeats), '--child', name, case],
                                 capture_output=True, text=True, check=True)
            res[name] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f'{case:8} {name:9} {res[name]["time_s"]:10.3f} {res[name]["peak_mib"]:9.1f}')
        print(f'{case:8} ratio hf/densevit: time {res["hf"]["time_s"] / res["densevit"]["time_s"]:.2f}x, '
              f'peak memory {res["hf"]["peak_mib"] / max(res["densevit"]["peak_mib"], 1e-9):.2f}x')


if __name__ == '__main__':
    main()
