"""Train one config with several seeds, resumably, one metrics file per run.

    python tools/run_seeds.py CONFIG --name NAME [--seeds 0 1 2] [--threads N]
        [--results docs/results] [--work-root work_dirs/seeds] [--cfg-options k=v ...]

Each seed S trains ``tools/train.py CONFIG --cfg-options randomness.seed=S`` in its own
process, in ``WORK_ROOT/NAME/seedS``, and on success writes ``RESULTS/NAME/seedS.json``
(:func:`densevit.utils.provenance.write_result`: command, commit, CPU model, threads):
every validation's metrics by iteration, the last validation's, the wall time, and each
attempt's provenance taken when it started (the commit and tree that trained).
Stopped at any point (Ctrl-C, a lost machine, the end of a session), the same command
goes on: seeds with a metrics file are skipped, a seed with a checkpoint resumes from it
(``--resume``) and its wall time adds up over the attempts. When every seed is done,
``RESULTS/NAME/summary.json`` holds, per metric, each seed's last value, the spread and
the worst seed, and the table is printed.
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time

from densevit.utils.provenance import provenance, write_result

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('config')
    p.add_argument('--name', required=True, help='the study: folder name under --results')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--threads', type=int, help='OMP_NUM_THREADS of each training process')
    p.add_argument('--results', default='docs/results', help='where the metrics files go')
    p.add_argument('--work-root', default='work_dirs/seeds', help='where the runs train')
    p.add_argument('--cfg-options', nargs='+', default=[], help='passed to tools/train.py')
    return p.parse_args(argv)


# what mmengine logs beside a validation's metrics (``coco/bbox_mAP``, ``mIoU``, ...)
_NOT_METRICS = ('step', 'time', 'data_time', 'epoch', 'iter')


def validations(work_dir):
    """``{iteration: {metric: value}}`` of every validation logged in ``work_dir`` (all
    attempts; a resumed attempt's record of an iteration replaces the earlier one)."""
    found = {}
    for path in sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            for line in f:
                record = json.loads(line) if line.strip() else {}
                if 'step' not in record or 'loss' in record:  # a training record
                    continue
                metrics = {k: v for k, v in record.items()
                           if k not in _NOT_METRICS and isinstance(v, (int, float))}
                if metrics:
                    found[int(record['step'])] = metrics
    return dict(sorted(found.items()))


def lower_is_better(key):
    """Losses and objectives (MAE's ``pretrain/objective``); AP, mIoU, accuracy are not."""
    return any(word in key.lower() for word in ('loss', 'objective', 'error'))


def summarise(runs):
    """Per metric of the last validation: each seed's value, min, max and the worst seed
    (the lowest, or the highest for a loss / objective: :func:`lower_is_better`)."""
    keys = sorted({k for run in runs.values() for k in run['last']})
    table = {}
    for key in keys:
        values = {seed: run['last'][key] for seed, run in runs.items() if key in run['last']}
        pick = max if lower_is_better(key) else min
        table[key] = dict(values=values, min=min(values.values()), max=max(values.values()),
                          worst_seed=pick(values, key=values.get))
    return table


def run_seed(args, seed):
    """Train (or resume) one seed; returns its metrics file, or None if training failed."""
    out = osp.join(args.results, args.name, f'seed{seed}.json')
    if osp.isfile(out):
        print(f'seed {seed}: done ({out})')
        return out
    work = osp.join(args.work_root, args.name, f'seed{seed}')
    command = [sys.executable, osp.join(REPO, 'tools', 'train.py'), args.config,
               '--work-dir', work]
    resumed = osp.isfile(osp.join(work, 'last_checkpoint'))
    if resumed:
        command.append('--resume')
    command += ['--cfg-options', f'randomness.seed={seed}', *args.cfg_options]
    env = dict(os.environ)
    if args.threads:
        env['OMP_NUM_THREADS'] = str(args.threads)
    print(f'seed {seed}: {"resuming" if resumed else "training"} in {work}', flush=True)
    started = provenance()  # the code that trains: edits made meanwhile do not count
    start = time.time()
    rc = subprocess.call(command, env=env)
    attempts_file = osp.join(work, 'run_seeds_attempts.json')
    attempts = json.load(open(attempts_file)) if osp.isfile(attempts_file) else []
    attempts.append(dict(seconds=round(time.time() - start, 1), exit_code=rc, resumed=resumed,
                         started=started))
    os.makedirs(work, exist_ok=True)
    with open(attempts_file, 'w') as f:
        json.dump(attempts, f)
    if rc != 0:
        print(f'seed {seed}: tools/train.py exited with {rc}; run the same command again to '
              f'resume', file=sys.stderr)
        return None
    found = validations(work)
    if not found:
        print(f'seed {seed}: no validation was logged in {work}', file=sys.stderr)
        return None
    last_iter = max(found)
    write_result(out, dict(seed=seed, validations=found, last_iteration=last_iter,
                           last=found[last_iter],
                           wall_seconds=round(sum(a['seconds'] for a in attempts), 1),
                           attempts=attempts),
                 config=args.config, cfg_options=args.cfg_options, work_dir=work,
                 threads=args.threads)
    print(f'seed {seed}: {out}')
    return out


def main(argv=None):
    args = parse_args(argv)
    files = {seed: run_seed(args, seed) for seed in args.seeds}
    if not all(files.values()):
        return 1
    runs = {seed: json.load(open(path))['results'] for seed, path in files.items()}
    table = summarise(runs)
    out = write_result(osp.join(args.results, args.name, 'summary.json'), table,
                       config=args.config, seeds=args.seeds, cfg_options=args.cfg_options)
    print(f'| metric | {" | ".join(f"seed {s}" for s in args.seeds)} | worst seed |')
    print(f'|---|{"---|" * len(args.seeds)}---|')
    for key, row in table.items():
        cells = ' | '.join(f'{row["values"].get(s, float("nan")):.4g}' for s in args.seeds)
        print(f'| {key} | {cells} | {row["worst_seed"]} |')
    print(f'summary: {out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
