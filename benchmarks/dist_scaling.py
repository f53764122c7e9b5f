"""Distributed scaling and data-loading share, measured from real training runs.

    python benchmarks/dist_scaling.py CONFIG [--nprocs 1 2] [--iters 30] [--skip 5]
        [--threads 1] [--work-dir DIR] [--json FILE] [--cfg-options k=v ...]

Trains CONFIG for ``--iters`` iterations once per entry of ``--nprocs`` (1: plain
``tools/train.py``; n > 1: ``tools/dist_train.sh CONFIG n``) with the same
per-process batch, no validation and a log record every iteration
(``log_processor.window_size=1``), then reads mmengine's per-iteration ``time``
(whole step) and ``data_time`` (waiting for the data loader) from
``vis_data/scalars.json``, skipping the first ``--skip`` iterations (start-up).

Reported per run: median step time, throughput (images/s over all processes),
data share = sum(data_time) / sum(time). For n processes against one:
scaling efficiency = throughput_n / (n x throughput_1) = t_1 / t_n (1.0 = linear).
Each process gets ``--threads`` torch threads (OMP_NUM_THREADS), so n processes
use n times the cores of one: compare on a machine with that many free cores.
``--json FILE`` writes the results with the command, commit and CPU
(``densevit.utils.provenance``; its thread count is this process's, the training
processes' is ``threads_per_process``).
"""
import argparse
import json
import os
import os.path as osp
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from densevit.utils.provenance import add_json_argument, write_result

ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def step_records(work_dir):
    """[(time, data_time)] per training iteration, in order, from scalars.json."""
    records = {}
    for path in sorted(Path(work_dir).glob('*/vis_data/scalars.json')):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if 'data_time' in r and 'loss' in r:
                records[r['step']] = (r['time'], r['data_time'])
    return [records[k] for k in sorted(records)]


def summarize(records, skip, batch, nproc):
    times = np.array([t for t, _ in records[skip:]])
    data = np.array([d for _, d in records[skip:]])
    if len(times) == 0:
        raise RuntimeError('no iterations left after --skip')
    step = float(np.median(times))
    return dict(nproc=nproc, iters=len(times), step_s=step, mean_step_s=float(times.mean()),
                images_per_s=nproc * batch / step, data_share=float(data.sum() / times.sum()),
                data_time_s=float(np.median(data)))


def run(config, nproc, work_dir, iters, options, threads):
    opts = [f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters + 1}',
            f'default_hooks.checkpoint.interval={iters + 1}', 'default_hooks.logger.interval=1',
            'log_processor.window_size=1', *options]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])))
    if nproc == 1:
        cmd = [sys.executable, str(ROOT / 'tools/train.py'), config]
    else:
        env['PORT'] = str(free_port())
        cmd = ['bash', str(ROOT / 'tools/dist_train.sh'), config, str(nproc)]
    cmd += ['--work-dir', work_dir, '--cfg-options', *opts]
    with open(osp.join(work_dir + '.log'), 'w') as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return step_records(work_dir)


def batch_size(config, options):
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    for opt in options:
        key, _, value = opt.partition('=')
        if key == 'train_dataloader.batch_size':
            return int(value)
    return cfg.train_dataloader.batch_size


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Distributed scaling and data-loading share')
    p.add_argument('config')
    p.add_argument('--nprocs', type=int, nargs='+', default=[1, 2])
    p.add_argument('--iters', type=int, default=30)
    p.add_argument('--skip', type=int, default=5, help='first iterations left out')
    p.add_argument('--threads', type=int, default=1, help='torch threads per process')
    p.add_argument('--work-dir', default='work_dirs/dist_scaling')
    add_json_argument(p)
    p.add_argument('--cfg-options', nargs='+', default=[],
                   help='passed to train.py as is, e.g. train_dataloader.num_workers=2')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    batch = batch_size(args.config, args.cfg_options)
    results = []
    for n in args.nprocs:
        work_dir = osp.join(args.work_dir, f'{n}proc')
        records = run(args.config, n, work_dir, args.iters, args.cfg_options, args.threads)
        results.append(summarize(records, args.skip, batch, n))
        r = results[-1]
        print(f"{n} process(es): step {r['step_s'] * 1000:.0f} ms (median of {r['iters']}), "
              f"{r['images_per_s']:.1f} images/s, data share {100 * r['data_share']:.1f}%")
    base = next((r for r in results if r['nproc'] == 1), None)
    for r in results:
        if base is not None and r['nproc'] > 1:
            r['scaling_efficiency'] = base['step_s'] / r['step_s']
            print(f"{r['nproc']} processes vs 1: scaling efficiency "
                  f"{100 * r['scaling_efficiency']:.0f}% (speed-up "
                  f"{r['images_per_s'] / base['images_per_s']:.2f}x)")
    if args.json:
        write_result(args.json, results, config=args.config, threads_per_process=args.threads,
                     batch_per_process=batch, cfg_options=args.cfg_options)
    return 0


if __name__ == '__main__':
    sys.exit(main())
