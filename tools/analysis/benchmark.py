"""Inference speed and memory: images/s, latency percentiles, peak memory.

    python tools/analysis/benchmark.py CONFIG [CHECKPOINT] --shape H W --batch N --iters N
        [--warmup N] [--device cpu|cuda] [--mode predict|tensor] [--threads N] [--bf16]
        [--json FILE]

Random images of the given shape go through the data preprocessor and the model
(``--mode predict``: with post-processing, as ``tools/test.py`` runs it; ``tensor``:
the network alone). ``--bf16``: under bf16 autocast, as ``tools/test.py --bf16`` runs
it. Data loading is not timed. Reported:

- throughput: ``batch x iters / total seconds``;
- latency per batch: p50 / p90 / p99 over the timed iterations;
- peak memory: on GPU ``torch.cuda.max_memory_allocated`` (tensors only, reset
  before the timed loop); on CPU how far the timed loop pushed the process's
  resident set above its level before the loop, with the high-water mark reset
  first so that the model build and warm-up do not hide it
  (``densevit.utils.memory.peak_rss_growth``); the absolute peak is printed beside it.
  ``benchmarks/bench_memory.py`` measures single forward passes this way.

``--json FILE`` writes these with the command, commit, CPU and thread count
(``densevit.utils.provenance``).
"""
import argparse
import sys
import time

import numpy as np
import torch
from mmengine.config import DictAction

from densevit.apis import init_model
from densevit.structures import DataSample
from densevit.utils.memory import peak_cuda_growth, peak_rss_growth
from densevit.utils.precision import autocast_context
from densevit.utils.provenance import add_json_argument, write_result


def fake_batch(batch, shape, seed=0):
    """Data as a dataloader would give it: uint8 CHW images and DataSamples."""
    g = torch.Generator().manual_seed(seed)
    h, w = shape
    inputs = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g)
              for _ in range(batch)]
    samples = [DataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), scale_factor=(1., 1.)))
               for _ in range(batch)]
    return dict(inputs=inputs, data_samples=samples)


def benchmark(model, shape, batch=1, iters=20, warmup=3, mode='predict', precision='fp32'):
    """Time ``iters`` batches after ``warmup`` in ``precision`` ('fp32' or 'bf16');
    returns a dict of the measurements."""
    device = next(model.parameters()).device
    cuda = device.type == 'cuda'

    def step():
        data = model.data_preprocessor(fake_batch(batch, shape), False)
        with autocast_context(precision, device.type):
            if mode == 'predict':
                model(**data, mode='predict')
            else:
                model(data['inputs'], data['data_samples'], mode='tensor')
        if cuda:
            torch.cuda.synchronize()

    with torch.no_grad():
        for _ in range(warmup):
            step()
        times = []
        with peak_cuda_growth(device) if cuda else peak_rss_growth() as mem:
            for _ in range(iters):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
    times = np.array(times)
    result = dict(device=str(device), mode=mode, precision=precision, batch=batch,
                  shape=list(shape), iters=iters,
                  images_per_s=batch * iters / times.sum(),
                  latency_ms={f'p{q}': float(np.percentile(times, q) * 1000) for q in (50, 90, 99)})
    if cuda:
        result['peak_memory_mb'] = mem.peak_mb
    else:
        result['peak_rss_growth_mb'] = mem.growth_mb
        result['peak_rss_mb'] = mem.peak_mb
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Benchmark inference')
    p.add_argument('config')
    p.add_argument('checkpoint', nargs='?', help='weights (default: random initialisation)')
    p.add_argument('--shape', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--iters', type=int, default=20)
    p.add_argument('--warmup', type=int, default=3)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--mode', choices=['predict', 'tensor'], default='predict')
    p.add_argument('--bf16', action='store_true', help='bf16 autocast (as tools/test.py --bf16)')
    p.add_argument('--threads', type=int, help='torch CPU threads')
    add_json_argument(p, 'the measurements')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = init_model(args.config, args.checkpoint, device=args.device,
                       cfg_options=args.cfg_options)
    precision = 'bf16' if args.bf16 else 'fp32'
    result = benchmark(model, tuple(args.shape), args.batch, args.iters, args.warmup, args.mode,
                       precision)
    lat = result['latency_ms']
    memory = (f"peak memory {result['peak_memory_mb']:.1f} MiB" if 'peak_memory_mb' in result
              else f"peak RSS +{result['peak_rss_growth_mb']:.1f} MiB during the timed loop "
                   f"(process peak {result['peak_rss_mb']:.0f} MiB)")
    print(f"{args.config}: {result['images_per_s']:.2f} images/s "
          f"(batch {args.batch}, {args.shape[0]}x{args.shape[1]}, {args.mode}, {precision}, {result['device']}, "
          f"{torch.get_num_threads()} threads); latency per batch p50 {lat['p50']:.1f} ms, "
          f"p90 {lat['p90']:.1f} ms, p99 {lat['p99']:.1f} ms; {memory}")
    if args.json:
        write_result(args.json, result, config=args.config, checkpoint=args.checkpoint,
                     cfg_options=dict(args.cfg_options))
    return 0


if __name__ == '__main__':
    sys.exit(main())
