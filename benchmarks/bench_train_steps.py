"""Training iterations per second of several configs, in one process, interleaved.

    python benchmarks/bench_train_steps.py CONFIG [CONFIG ...] [--steps 20] [--threads 1]
        [--json FILE]

e.g. the three DETR-on-ViT quickstarts (vanilla DETR, Plain-DETR, Deformable DETR):

    python benchmarks/bench_train_steps.py configs/quickstart/detr_vit_shapes_vanilla.py \\
        configs/quickstart/detr_vit_shapes.py configs/quickstart/deformable_detr_vit_shapes.py \\
        --threads 1 --json docs/results/train_steps_detr_vit_quickstarts.json

Each config's model is built with its random initialisation and its ``optim_wrapper``
(optimiser, gradient clipping, parameter-wise settings), and one batch is drawn from its
``train_dataloader`` (shuffling seeded, no worker processes). A step is
``model.train_step(batch, optim_wrapper)``: data preprocessing, forward, loss, backward and
the optimiser update, as in training, without data loading (timed apart by
``benchmarks/dist_scaling.py``). After one warm-up step each, the models take turns, one step
at a time, the order rotated every round, so that a change in the machine's load falls on all
of them alike. Printed: each config's median step time, its iterations per second, and its
time over the first config's (the median of the per-round ratios).
"""
import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

import densevit  # noqa: F401
from densevit.registry import MODELS
from densevit.utils.provenance import add_json_argument, write_result


def build(config, seed=0):
    """(model in train mode, its optim wrapper, one collated training batch)."""
    cfg = Config.fromfile(config)
    cfg.model.get('backbone', {}).pop('init_cfg', None)
    loader = copy.deepcopy(cfg.train_dataloader)
    loader.update(num_workers=0, persistent_workers=False)
    torch.manual_seed(seed)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model)
        model.init_weights()
        model.train()
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
        batch = next(iter(Runner.build_dataloader(loader, seed=seed)))
    return model, optim, batch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('configs', nargs='+')
    p.add_argument('--steps', type=int, default=20, help='timed steps per config (default 20)')
    p.add_argument('--threads', type=int, help="torch threads (default: torch's)")
    add_json_argument(p)
    args = p.parse_args(argv)
    for c in args.configs:
        if not Path(c).is_file():
            p.error(f'no such config: {c}')
    if args.steps < 1:
        p.error(f'--steps must be at least 1, got {args.steps}')
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = [build(c) for c in args.configs]
    for model, optim, batch in runs:  # warm-up
        model.train_step(batch, optim)
    times = [[] for _ in runs]
    for r in range(args.steps):
        k = r % len(runs)
        for i in list(range(k, len(runs))) + list(range(k)):
            model, optim, batch = runs[i]
            t = time.perf_counter()
            model.train_step(batch, optim)
            times[i].append(time.perf_counter() - t)
    rows = []
    print(f'torch {torch.__version__}, threads {torch.get_num_threads()}, {args.steps} steps each')
    print('| config | batch | step (ms) | iterations/s | time / first config |')
    print('|---|---|---|---|---|')
    for c, (_, _, batch), t in zip(args.configs, runs, times, strict=True):
        med = statistics.median(t)
        ratio = statistics.median(a / b for a, b in zip(t, times[0], strict=True))
        n = len(batch['inputs'])
        rows.append(dict(config=c, batch=n, step_ms=med * 1e3, iterations_per_s=1 / med,
                         over_first=ratio))
        print(f'| {c} | {n} | {med * 1e3:.0f} | {1 / med:.2f} | {ratio:.2f} |', flush=True)
    if args.json:
        write_result(args.json, dict(rows=rows), steps=args.steps)
    return 0


if __name__ == '__main__':
    sys.exit(main())
