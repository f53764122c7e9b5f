"""Deformable attention core, forward + backward: densevit vs HF transformers, CPU or CUDA.

    OMP_NUM_THREADS=1 python benchmarks/bench_deform_attn.py [--batch 1] [--repeats 5] [--json FILE]
    python benchmarks/bench_deform_attn.py --device cuda [--batch 2] [--repeats 20] [--json FILE]

Shapes of Deformable DETR on COCO: 4 levels of an 800x1066 image (100x134, 50x67, 25x34,
13x17), d 256, 8 heads, 4 points; "encoder" = every pixel a query (S = 17,821),
"decoder" = 300 queries. Times, of a forward + backward and of a forward without
autograd (inference; densevit samples in another layout there, see
``multi_scale_deformable_attn``): both implementations in one process, alternating
(the order flips every repeat, so a change of load on the machine falls on both),
median of ``--repeats`` after one warm-up each. Peak memory: each implementation in a
process of its own, how far a warm-up and one step pushed the resident set above its
level once the inputs were made (:func:`densevit.utils.memory.peak_rss_growth`, the
high-water mark reset first). The reference is ``transformers.models.deformable_detr``'s pure-PyTorch
``MultiScaleDeformableAttention``. ``--json FILE`` writes the printed numbers with the
command, commit, CPU and thread count (``densevit.utils.provenance``).

``--device cuda`` times on the GPU (synchronised around each step) and adds a third
contender, densevit asked for points-major (``layout='points'``; CUDA's default is
query-major), to decide which layout CUDA should take; peak memory there is
``torch.cuda.max_memory_allocated`` above its level before the step, in this process.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from densevit.utils.memory import peak_cuda_growth, peak_rss_growth
from densevit.utils.provenance import add_json_argument, write_result

SHAPES = [(100, 134), (50, 67), (25, 34), (13, 17)]
D, M, L, P = 256, 8, 4, 4


DEVICE = torch.device('cpu')  # --device


def _inputs(batch, queries):
    g = torch.Generator().manual_seed(0)
    S = sum(h * w for h, w in SHAPES)
    value = torch.randn(batch, S, M, D // M, generator=g)
    loc = torch.rand(batch, queries, M, L, P, 2, generator=g)
    w = torch.rand(batch, queries, M, L * P, generator=g).softmax(-1)
    w = w.view(batch, queries, M, L, P)
    return tuple(t.to(DEVICE).requires_grad_() for t in (value, loc, w))


def _impl(name):
    shapes = torch.tensor(SHAPES, device=DEVICE)
    if name.startswith('densevit'):
        from densevit.models.layers.ms_deform_attn import multi_scale_deformable_attn
        layout = 'points' if name == 'densevit_points' else None
        return lambda v, lo, w: multi_scale_deformable_attn(v, shapes, lo, w, layout=layout)
    from transformers.models.deformable_detr.modeling_deformable_detr import (
        MultiScaleDeformableAttention,
    )
    hf = MultiScaleDeformableAttention()
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    return lambda v, lo, w: hf(v, shapes, SHAPES, starts, lo, w, 64)


def _queries(case):
    return sum(h * w for h, w in SHAPES) if case == 'encoder' else 300


def _sync():
    if DEVICE.type == 'cuda':
        torch.cuda.synchronize()


def _step(fn, inputs):
    """One forward + backward; seconds."""
    for t in inputs:
        t.grad = None
    _sync()
    t0 = time.perf_counter()
    fn(*inputs).sum().backward()
    _sync()
    return time.perf_counter() - t0


def _forward(fn, inputs):
    """One forward without autograd (inference); seconds."""
    with torch.no_grad():
        _sync()
        t0 = time.perf_counter()
        fn(*inputs)
        _sync()
        return time.perf_counter() - t0


def _cuda_peak_mib(fn, inputs):
    """Peak CUDA memory of one forward + backward above the level before it, MiB."""
    _step(fn, inputs)
    with peak_cuda_growth() as mem:
        _step(fn, inputs)
    return mem.growth_mb


def child(name, case, batch):
    """Peak memory of one implementation in a process of its own (warm-up + one step)."""
    fn, inputs = _impl(name), _inputs(batch, _queries(case))
    with peak_rss_growth() as mem:
        _step(fn, inputs)
        _step(fn, inputs)
    print(json.dumps(dict(peak_mib=mem.growth_mb)))


def _names():
    return ('densevit', 'densevit_points', 'hf') if DEVICE.type == 'cuda' else ('densevit', 'hf')


def interleaved_times(case, batch, repeats, timed=_step):
    """Median seconds of ``timed`` (``_step`` or ``_forward``) per implementation, all in
    this process and alternating (in order on even repeats, reversed on odd ones), so a
    change of load falls on each alike."""
    fns, inputs = {name: _impl(name) for name in _names()}, _inputs(batch, _queries(case))
    for fn in fns.values():
        timed(fn, inputs)  # warm-up
    times = {name: [] for name in fns}
    for i in range(repeats):
        for name in (list(fns) if i % 2 == 0 else list(fns)[::-1]):
            times[name].append(timed(fns[name], inputs))
    return {name: statistics.median(t) for name, t in times.items()}


def peak_mib(name, case, batch):
    """Peak memory of one implementation's forward + backward (see the module's docstring)."""
    if DEVICE.type == 'cuda':
        return _cuda_peak_mib(_impl(name), _inputs(batch, _queries(case)))
    out = subprocess.run([sys.executable, __file__, '--batch', str(batch), '--child', name, case],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])['peak_mib']


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    p.add_argument('--child', nargs=2, metavar=('IMPL', 'CASE'), help=argparse.SUPPRESS)
    add_json_argument(p)
    args = p.parse_args()
    if args.child:
        return child(*args.child, args.batch)
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == 'cuda' and not torch.cuda.is_available():
        sys.exit('--device cuda: torch sees no CUDA GPU')
    where = torch.cuda.get_device_name() if DEVICE.type == 'cuda' else 'cpu'
    print(f'torch {torch.__version__}, {where}, threads {torch.get_num_threads()}, '
          f'batch {args.batch}')
    print(f'{"case":8} {"impl":9} {"fwd+bwd s":>10} {"peak MiB":>9} {"forward s":>10}')
    results = {}
    for case in ('encoder', 'decoder'):
        times = interleaved_times(case, args.batch, args.repeats)
        forward = interleaved_times(case, args.batch, args.repeats, timed=_forward)
        peaks = {}
        for name in times:
            peaks[name] = peak_mib(name, case, args.batch)
            print(f'{case:8} {name:9} {times[name]:10.3f} {peaks[name]:9.1f} '
                  f'{forward[name]:10.3f}')
        results[case] = dict(queries=_queries(case), seconds=times, peak_mib=peaks,
                             forward_seconds=forward)
        for name in times:
            if name == 'hf':
                continue
            ratios = dict(time=times['hf'] / times[name],
                          peak_memory=peaks['hf'] / max(peaks[name], 1e-9),
                          forward_time=forward['hf'] / forward[name])
            key = 'hf_over_densevit' + name[len('densevit'):]
            results[case][key] = ratios
            print(f'{case:8} ratio hf/{name}: time {ratios["time"]:.2f}x, '
                  f'peak memory {ratios["peak_memory"]:.2f}x, forward time '
                  f'{ratios["forward_time"]:.2f}x')
    if args.json:
        write_result(args.json, results, batch=args.batch, repeats=args.repeats,
                     device=args.device)

if __name__ == '__main__':
    main()
