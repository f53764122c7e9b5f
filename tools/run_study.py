"""Train a study's grid of configs, resumably, and table it as the ViT paper's Table 8.

    python tools/run_study.py configs/studies/vit_pe [--seeds 0]
        [--three-seed-rows none learned_1d-stem ...] [--three-seeds 0 1 2]
        [--threads 1] [--parallel 2] [--max-iters N] [--metrics coco/bbox_mAP_50]
        [--name NAME] [--results docs/results] [--work-root work_dirs/studies]
        [--start-within MINUTES] [--cfg-options k=v ...] [--table-only] [--rows name]

The grid is every ``*.py`` of a study folder (the study's name: the folder's) or the
configs given (then ``--name``). A config's row name is its file name after ``_pe-``
(``detr_vit_shapes_pe-learned_1d-stem.py``: ``learned_1d-stem``), else its stem. Each row
trains ``--seeds`` (default 0), the rows named in ``--three-seed-rows`` ``--three-seeds``.
Each run is ``tools/run_seeds.py``'s (:func:`run_seeds.train_run`: ``tools/train.py`` in
its own process, ``--threads`` OMP threads) in ``WORK_ROOT/NAME/STEM/seedS``, its metrics
file ``RESULTS/NAME/STEM/seedS.json``; ``--parallel P`` runs P at a time (each one's
output then goes to ``train_output.log`` in its work dir). The same command goes on
after a stop: finished runs are skipped, stopped ones resume from their checkpoint. A run
that records another config is refused before anything trains, naming both (exit code 2).

``--max-iters N`` sets ``train_cfg.max_iters`` and moves the schedulers with it (an
``end`` at the config's last iteration becomes N, milestones are scaled); every metrics
file records its ``max_iters``. ``--start-within M`` starts no run more than M minutes after
the command began (the runs left are named; the same command goes on with them later): a grid
spanning sessions whose work folders do not outlive them loses no half-trained run at a
session's end. At the end, and alone with ``--table-only``,
``RESULTS/NAME/table.json`` holds each config's values per seed with their mean, min and
max, the budget and the commands that trained them, and a Markdown table is printed per
metric: rows the position-embedding type, columns its placement (read from each config's
``model.backbone.pos_embed``), a cell the value, or mean (min-max) over several seeds; with
``--rows name``, a row per config (its file's stem) and one column, for a grid that varies
something else than the position embedding.
"""
import argparse
import glob
import json
import os.path as osp
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from mmengine.config import Config

from densevit.analysis.study_rows import position, row_name  # noqa: F401  (run_study.position)
from densevit.models.layers.pos_embed_builder import (
    PLACEMENTS,
    POSITION_EMBEDDING_TYPES,
)
from densevit.utils.provenance import write_result
from densevit.utils.script_module import load_script

# tools/run_seeds.py as a module (tools/ is not a package): its runs are this grid's
run_seeds = load_script(osp.join(osp.dirname(osp.abspath(__file__)), 'run_seeds.py'))

# the metric tabled when --metrics is not given: the first of these the runs logged
DEFAULT_METRICS = ('coco/bbox_mAP_50', 'mIoU')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('grid', nargs='+', help='a study folder, or config files')
    p.add_argument('--name', help='the study: folder name under --results (default: the '
                   "study folder's name)")
    p.add_argument('--seeds', type=int, nargs='+', default=[0], help='seeds of every row')
    p.add_argument('--three-seed-rows', nargs='+', default=[], metavar='ROW',
                   help='rows that train --three-seeds instead')
    p.add_argument('--three-seeds', type=int, nargs=3, default=[0, 1, 2])
    p.add_argument('--threads', type=int, help='OMP_NUM_THREADS of each training process')
    p.add_argument('--parallel', type=int, default=1, help='runs training at a time')
    p.add_argument('--max-iters', type=int, help='the budget of every run (see above)')
    p.add_argument('--metrics', nargs='+', help='what the table shows (default: the first of '
                   f'{", ".join(DEFAULT_METRICS)} logged)')
    p.add_argument('--results', default='docs/results', help='where the metrics files go')
    p.add_argument('--work-root', default='work_dirs/studies', help='where the runs train')
    p.add_argument('--cfg-options', nargs='+', default=[], help='passed to tools/train.py')
    p.add_argument('--start-within', type=float, metavar='MINUTES',
                   help='start no run later than this many minutes after the command began')
    p.add_argument('--table-only', action='store_true', help='train nothing: table the runs')
    p.add_argument('--rows', choices=('position', 'name'), default='position',
                   help="the table's rows: position-embedding type x placement, or a row per "
                   'config (its file name)')
    args = p.parse_args(argv)
    folders = [g for g in args.grid if osp.isdir(g)]
    if folders and len(args.grid) > 1:
        p.error('give one study folder, or config files')
    args.configs = sorted(glob.glob(osp.join(folders[0], '*.py'))) if folders else args.grid
    args.name = args.name or (osp.basename(osp.normpath(folders[0])) if folders else None)
    missing = [c for c in args.configs if not osp.isfile(c)]
    if not args.configs or missing or not args.name:
        p.error(f'config not found: {", ".join(missing)}' if missing else
                f'no config in {args.grid[0]}' if not args.configs else
                '--name is needed with a list of configs')
    if args.parallel < 1:
        p.error(f'--parallel must be at least 1, got {args.parallel}')
    if args.start_within is not None and args.start_within < 0:
        p.error(f'--start-within must be at least 0 minutes, got {args.start_within}')
    if args.max_iters is not None and any(o.startswith('train_cfg.max_iters=')
                                          for o in args.cfg_options):
        p.error('give the budget once: --max-iters or --cfg-options train_cfg.max_iters=N')
    return args


def seeds_per_config(configs, seeds, three_seed_rows=(), three_seeds=(0, 1, 2)):
    """``{config: seeds}``; a row of ``three_seed_rows`` that is no config's is a ValueError."""
    rows = {row_name(c): c for c in configs}
    unknown = sorted(set(three_seed_rows) - set(rows))
    if unknown:
        raise ValueError(f'--three-seed-rows: no config has the row {", ".join(unknown)} '
                         f'(rows: {", ".join(rows)})')
    return {c: list(three_seeds if row_name(c) in three_seed_rows else seeds) for c in configs}


def budget_options(config, max_iters):
    """``--cfg-options`` that make ``config`` train ``max_iters`` iterations, its schedulers
    moved along: an ``end`` at the config's last iteration becomes ``max_iters``, milestones
    are scaled by ``max_iters / config's``."""
    cfg = Config.fromfile(config)
    old = cfg.train_cfg.get('max_iters')
    if not old:
        raise ValueError(f'{config}: --max-iters needs an iteration-based config '
                         f'(train_cfg.max_iters); this one has none')
    options = [f'train_cfg.max_iters={max_iters}']
    schedulers = cfg.get('param_scheduler') or []
    many = isinstance(schedulers, (list, tuple))
    for i, s in enumerate(schedulers if many else [schedulers]):
        key = f'param_scheduler.{i}' if many else 'param_scheduler'
        if s.get('end') == old:
            options.append(f'{key}.end={max_iters}')
        if s.get('milestones'):
            scaled = [round(m * max_iters / old) for m in s['milestones']]
            options.append(f'{key}.milestones=[{",".join(map(str, scaled))}]')
    return options


NOT_STARTED = 'not started'


def train_grid(args, plan, options):
    """Train every (config, seed) of ``plan`` not done, ``args.parallel`` at a time, none
    started after ``args.start_within`` minutes; returns (runs failed, runs not started).
    Raises ``ConfigMismatch`` before training anything."""
    began = time.monotonic()
    jobs = []
    for config, seeds in plan.items():
        stem = osp.splitext(osp.basename(config))[0]
        for seed in seeds:
            out, work = run_seeds.run_paths(args.results, args.work_root,
                                            f'{args.name}/{stem}', seed)
            run_seeds.check_config(config, out, work)
            jobs.append((config, seed, out, work))

    def one(job):
        config, seed, out, work = job
        label = f'{row_name(config)} seed {seed}'
        late = args.start_within is not None and \
            time.monotonic() - began > args.start_within * 60
        if late and not osp.isfile(out):
            print(f'{label}: not started (past --start-within {args.start_within:g} minutes)',
                  flush=True)
            return NOT_STARTED
        log = osp.join(work, 'train_output.log') if args.parallel > 1 else None
        return run_seeds.train_run(config, seed, out, work, threads=args.threads,
                                   cfg_options=options[config], label=label, log=log)

    pool = ThreadPoolExecutor(max_workers=args.parallel)
    try:
        outs = list(pool.map(one, jobs))
        return sum(out is None for out in outs), sum(out == NOT_STARTED for out in outs)
    finally:  # on Ctrl-C: no queued run starts; the running ones save and stop
        pool.shutdown(wait=True, cancel_futures=True)


def cell(values):
    """Mean, min and max of ``{seed: value}``."""
    numbers = list(values.values())
    return dict(values=values, mean=sum(numbers) / len(numbers), min=min(numbers),
                max=max(numbers))


def read_runs(results, name, config):
    """``{seed: metrics file contents}`` of ``config``'s finished runs."""
    stem = osp.splitext(osp.basename(config))[0]
    runs = {}
    for path in glob.glob(osp.join(results, name, stem, 'seed*.json')):
        with open(path) as f:
            runs[int(osp.basename(path)[4:-5])] = json.load(f)
    return dict(sorted(runs.items()))


def make_table(configs, results, name, metrics=None, rows_by='position'):
    """What ``table.json`` holds (see the module doc); ``rows_by='name'``: each config is a
    row of its own (its file's stem), in one column."""
    rows = {}
    for config in configs:
        runs = read_runs(results, name, config)
        row, column = (position(config) if rows_by == 'position' else
                       (osp.splitext(osp.basename(config))[0], 'all'))
        rows[osp.splitext(osp.basename(config))[0]] = dict(
            config=run_seeds.config_id(config), row=row, column=column, runs=runs)
    logged = [k for r in rows.values() for run in r['runs'].values() for k in run['results']['last']]
    metrics = metrics or [next((m for m in DEFAULT_METRICS if m in logged), None) or
                          (sorted(logged) or ['metric'])[0]]  # 'metric': no run yet
    cells, budgets, commands = {}, set(), []
    for stem, r in rows.items():
        lasts = {seed: run['results']['last'] for seed, run in r['runs'].items()}
        cells[stem] = dict(config=r['config'], row=r['row'], column=r['column'],
                           seeds=list(r['runs']),
                           metrics={m: cell({s: v[m] for s, v in lasts.items()})
                                    for m in metrics if any(m in v for v in lasts.values())})
        for run in r['runs'].values():
            budgets.add(run.get('max_iters') or run['results']['last_iteration'])
            if run['provenance']['command'] not in commands:
                commands.append(run['provenance']['command'])
    return dict(study=name, metrics=metrics, max_iters=sorted(budgets), commands=commands,
                cells=cells)


def _order(names, known):
    return sorted(set(names), key=lambda n: (known.index(n) if n in known else len(known), n))


def markdown(table, metric):
    """The Markdown table of ``metric``: rows types, columns placements."""
    cells = table['cells'].values()
    rows = _order([c['row'] for c in cells], POSITION_EMBEDDING_TYPES)
    columns = _order([c['column'] for c in cells], PLACEMENTS)
    lines = [f'| {metric} | {" | ".join(columns)} |', f'|---|{"---|" * len(columns)}']
    for row in rows:
        texts = []
        for column in columns:
            here = [c for c in cells if (c['row'], c['column']) == (row, column)]
            value = here[0]['metrics'].get(metric) if here else None
            texts.append('-' if not here else 'not run' if not here[0]['seeds'] else
                         'no value' if not value else
                         f'{value["mean"]:.4g}' if len(value['values']) == 1 else
                         f'{value["mean"]:.4g} ({value["min"]:.4g}-{value["max"]:.4g})')
        lines.append(f'| {row} | {" | ".join(texts)} |')
    return '\n'.join(lines)


def write_table(args):
    """Write ``RESULTS/NAME/table.json`` and print the tables, budget and commands."""
    table = make_table(args.configs, args.results, args.name, args.metrics, args.rows)
    out = write_result(osp.join(args.results, args.name, 'table.json'), table)
    for metric in table['metrics']:
        print(markdown(table, metric) + '\n')
    print(f'budget: max_iters {", ".join(map(str, table["max_iters"])) or "-"}; a cell with '
          f'several seeds: mean (min-max)')
    for command in table['commands']:
        print(f'command: {command}')
    print(f'table: {out}')


def main(argv=None):
    args = parse_args(argv)
    failed = left = 0
    if not args.table_only:
        try:
            plan = seeds_per_config(args.configs, args.seeds, args.three_seed_rows,
                                    args.three_seeds)
            extra = {c: budget_options(c, args.max_iters) if args.max_iters else []
                     for c in plan}
            options = {c: [*args.cfg_options, *extra[c]] for c in plan}
            failed, left = train_grid(args, plan, options)
        except (ValueError, run_seeds.ConfigMismatch) as e:
            print(f'run_study.py: refused: {e}', file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print('run_study.py: interrupted; run the same command again to go on',
                  file=sys.stderr)
            return 130
    write_table(args)
    if left:
        print(f'{left} run(s) not started (--start-within): run the same command again to '
              'train them', file=sys.stderr)
    if failed:
        print(f'{failed} run(s) failed: run the same command again to resume them',
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
