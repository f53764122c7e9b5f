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
(``--resume``) and its wall time adds up over the attempts. ``{seed}`` in a
``--cfg-options`` value becomes the seed, so a second stage loads its own seed's first stage
(``load_from=work_dirs/seeds/STAGE1/seed{seed}/iter_N.pth``). When every seed is done,
``RESULTS/NAME/summary.json`` holds, per metric, each seed's last value, the spread and
the worst seed, and the table is printed.

A run keeps the config it started with: a metrics file or work dir that records another
config (``WORK/run_seeds_config.json``, written before training; in an older work dir the
name of mmengine's copy of the config) is refused before anything trains, naming both
(exit code 2). ``tools/run_study.py`` runs a grid of configs through :func:`train_run`.
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
    p.add_argument('--cfg-options', nargs='+', default=[],
                   help='passed to tools/train.py; {seed} in a value becomes the seed')
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


# written in a run's work dir before it trains: the config it trains (see check_config)
RECORD = 'run_seeds_config.json'


class ConfigMismatch(Exception):
    """A run (metrics file or work dir) that records another config than the command's."""


def config_id(path, base=None):
    """``path`` as the runs record it: relative to the repository root when inside it, else
    absolute. A relative ``path`` is read from ``base`` (default: the current folder; a
    recorded one: the repository root, where the documented commands run)."""
    full = osp.realpath(osp.join(base or os.getcwd(), path))
    rel = osp.relpath(full, REPO)
    return full if rel.split(os.sep)[0] == '..' else rel


def recorded_configs(out, work):
    """``[(file, config)]``: the config the metrics file ``out`` and the work dir ``work``
    record. A work dir from before :data:`RECORD` gives the name of mmengine's copy of its
    config (``WORK/NAME.py``), so only the file name is known there."""
    found = []
    for path in (out, osp.join(work, RECORD)):
        if osp.isfile(path):
            with open(path) as f:
                recorded = json.load(f).get('config')
            if recorded:
                found.append((path, config_id(recorded, REPO)))
    if not osp.isfile(osp.join(work, RECORD)):
        found += [(copy, osp.basename(copy)) for copy in sorted(glob.glob(osp.join(work, '*.py')))]
    return found


def check_config(config, out, work):
    """Raise :class:`ConfigMismatch` when the run at ``out`` / ``work`` records another config
    than ``config``: a finished run would be taken as this config's, a stopped one would
    resume another model's training."""
    given = config_id(config)
    for path, recorded in recorded_configs(out, work):
        same = recorded == osp.basename(given) if path.endswith('.py') else recorded == given
        if not same:
            raise ConfigMismatch(
                f'{path} records config {recorded}, this command gives {given}: a run keeps '
                f'the config it started with (give another name, or remove {path})')


def trained_max_iters(config, work):
    """``train_cfg.max_iters`` of the run in ``work``, read from mmengine's copy of the config
    there (``--cfg-options`` merged): the budget a metrics file records (None when the copy
    is missing or the config is epoch-based)."""
    from mmengine.config import Config
    copy = osp.join(work, osp.basename(config))
    return Config.fromfile(copy).train_cfg.get('max_iters') if osp.isfile(copy) else None


def _train(command, work, threads, log):
    """Run ``command`` (tools/train.py) with ``threads`` OMP threads, its output to the
    terminal or appended to ``log``; returns its exit code."""
    env = dict(os.environ)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    if not log:
        return subprocess.call(command, env=env)
    with open(log, 'a') as f:
        return subprocess.call(command, env=env, stdout=f, stderr=subprocess.STDOUT)


def _add_attempt(work, attempt):
    """Append ``attempt`` to the work dir's attempts file; returns every attempt so far."""
    path = osp.join(work, 'run_seeds_attempts.json')
    attempts = json.load(open(path)) if osp.isfile(path) else []
    attempts.append(attempt)
    with open(path, 'w') as f:
        json.dump(attempts, f)
    return attempts


def train_run(config, seed, out, work, threads=None, cfg_options=(), label=None, log=None):
    """Train (or resume) ``config`` with seed ``seed`` in ``work`` and write its metrics file
    ``out``; a run whose ``out`` exists is skipped. Returns ``out``, or None if training
    failed. ``label`` names the run in the lines printed (default ``seed S``); ``log``: a file
    that takes tools/train.py's output (runs side by side). Raises :class:`ConfigMismatch`
    (before training) when ``out`` or ``work`` records another config."""
    label = label or f'seed {seed}'
    check_config(config, out, work)
    if osp.isfile(out):
        print(f'{label}: done ({out})')
        return out
    command = [sys.executable, osp.join(REPO, 'tools', 'train.py'), config, '--work-dir', work]
    resumed = osp.isfile(osp.join(work, 'last_checkpoint'))
    if resumed:
        command.append('--resume')
    command += ['--cfg-options', f'randomness.seed={seed}', *cfg_options]
    os.makedirs(work, exist_ok=True)
    with open(osp.join(work, RECORD), 'w') as f:
        json.dump(dict(config=config_id(config), cfg_options=list(cfg_options)), f)
    print(f'{label}: {"resuming" if resumed else "training"} in {work}', flush=True)
    started = provenance()  # the code that trains: edits made meanwhile do not count
    start = time.time()
    rc = _train(command, work, threads, log)
    attempts = _add_attempt(work, dict(seconds=round(time.time() - start, 1), exit_code=rc,
                                       resumed=resumed, started=started))
    if rc != 0:
        where = f' (its output: {log})' if log else ''
        print(f'{label}: tools/train.py exited with {rc}{where}; run the same command again '
              f'to resume', file=sys.stderr)
        return None
    found = validations(work)
    if not found:
        print(f'{label}: no validation was logged in {work}', file=sys.stderr)
        return None
    last_iter = max(found)
    write_result(out, dict(seed=seed, validations=found, last_iteration=last_iter,
                           last=found[last_iter],
                           wall_seconds=round(sum(a['seconds'] for a in attempts), 1),
                           attempts=attempts),
                 config=config_id(config), cfg_options=list(cfg_options), work_dir=work,
                 threads=threads, max_iters=trained_max_iters(config, work))
    print(f'{label}: {out}')
    return out


def seed_options(cfg_options, seed):
    """``cfg_options`` for seed ``seed``: every ``{seed}`` replaced by it."""
    return [option.replace('{seed}', str(seed)) for option in cfg_options]


def run_paths(results, work_root, name, seed):
    """(metrics file, work dir) of seed ``seed`` of the study ``name``."""
    return (osp.join(results, name, f'seed{seed}.json'),
            osp.join(work_root, name, f'seed{seed}'))


def main(argv=None):
    args = parse_args(argv)
    paths = {seed: run_paths(args.results, args.work_root, args.name, seed) for seed in args.seeds}
    try:
        for out, work in paths.values():  # every seed checked before any trains
            check_config(args.config, out, work)
        files = {seed: train_run(args.config, seed, *paths[seed], threads=args.threads,
                                 cfg_options=seed_options(args.cfg_options, seed))
                 for seed in args.seeds}
    except ConfigMismatch as e:
        print(f'run_seeds.py: refused: {e}', file=sys.stderr)
        return 2
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
