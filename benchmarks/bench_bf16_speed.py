"""bf16 against fp32 inference time of one model, interleaved in one process.

    python benchmarks/bench_bf16_speed.py CONFIG [CHECKPOINT] --shape H W [--rounds 3]
        [--iters 2] [--threads N] [--json FILE]

Each round times ``tools/analysis/benchmark.py``'s ``benchmark()`` (``--mode predict``,
batch 1, one warm-up, ``--iters`` timed batches: their median) once per precision, the
order alternating from round to round, so that a change in the machine's load falls on
both; printed: each round's times, the medians and the speed-up. Random weights unless a
checkpoint is given (speed does not depend on them). ``--json FILE`` writes the times with
the command, commit, CPU and thread count (``densevit.utils.provenance``).
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

from densevit.apis import init_model
from densevit.utils.provenance import add_json_argument, write_result
from densevit.utils.script_module import load_script

_TOOL = Path(__file__).resolve().parents[1] / 'tools' / 'analysis' / 'benchmark.py'


def _benchmark_tool():
    """tools/analysis/benchmark.py as a module (tools/ is not a package)."""
    return load_script(_TOOL)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('config')
    p.add_argument('checkpoint', nargs='?')
    p.add_argument('--shape', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--iters', type=int, default=2)
    p.add_argument('--threads', type=int)
    add_json_argument(p)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    benchmark = _benchmark_tool().benchmark
    model = init_model(args.config, args.checkpoint)
    times = {'fp32': [], 'bf16': []}
    for r in range(args.rounds):
        for precision in (('fp32', 'bf16') if r % 2 == 0 else ('bf16', 'fp32')):
            result = benchmark(model, tuple(args.shape), 1, args.iters, 1, 'predict', precision)
            times[precision].append(result['latency_ms']['p50'])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f'{args.config} {args.shape[0]}x{args.shape[1]}, {torch.get_num_threads()} threads: '
          f'fp32 {[round(t) for t in times["fp32"]]} ms, bf16 {[round(t) for t in times["bf16"]]} '
          f'ms; median {med["fp32"]:.0f} vs {med["bf16"]:.0f} ms, '
          f'bf16 speed-up x{med["fp32"] / med["bf16"]:.2f}')
    if args.json:
        write_result(args.json, dict(shape=args.shape, times_ms=times, median_ms=med,
                                     bf16_speedup=med['fp32'] / med['bf16']),
                     config=args.config, checkpoint=args.checkpoint, iters=args.iters)
    return 0


if __name__ == '__main__':
    sys.exit(main())
