"""Draw the validation metric of several training runs into one picture.

    python tools/analysis/plot_curves.py work_dirs/curves/* --out curves.png
    python tools/analysis/plot_curves.py work_dirs/seed_* --x iter --out seeds.png
    python tools/analysis/plot_curves.py work_dirs/seed_* --x iter --table   # also print a table
    python tools/analysis/plot_curves.py work_dirs/seed_* --x iter --json seeds.json
    python tools/analysis/plot_curves.py work_dirs/run --x iter --keys loss   # the training log
    python tools/analysis/plot_curves.py a/seed{0,1,2}.json b/seed{0,1,2}.json --x iter --group 3

Against training minutes, each WORK_DIR holds the ``training_clock.csv`` that
``tools/train.py --minutes`` writes; against iterations (``--x iter``), any
``tools/train.py`` work dir will do (its ``*/vis_data/scalars.json``), or the metrics file
``tools/run_seeds.py`` kept of a run (``docs/results/NAME/seedS.json``).
``--json FILE`` writes each run's main metric at every validation (the numbers of the
table, unrounded) with the command, commit and machine (``densevit.utils.provenance``).
``--keys K1 [K2]`` draws scalars of the training log instead (``loss``, a loss term,
``grad_norm``, ``teacher_entropy``, ..., as MMDetection's ``analyze_logs.py plot_curve
--keys``): K1 solid, K2 dashed, against iterations (``--x iter``); the table and the JSON
then hold K1 at every logged iteration, the JSON K2 too.
"""
import argparse
import os.path as osp
import sys

from densevit.utils.provenance import add_json_argument, write_result
from densevit.visualization.training_curve import (
    _curve_keys,
    curve_table,
    plot_curves,
    read_rows,
    series,
)


def curve_values(work_dirs, x, labels=None, keys=None):
    """Per run: its label, work dir, main metric and that metric at every validation
    (``x``: the minutes or iterations), as ``curve_table`` tabulates them; with ``keys``,
    the first training-log scalar at every logged iteration and the second as ``companion``."""
    labels = labels or [osp.basename(osp.normpath(wd)) for wd in work_dirs]
    runs = []
    for wd, label in zip(work_dirs, labels, strict=True):
        rows = read_rows(wd, x, keys=keys)
        drawn = _curve_keys(wd, rows, keys)[0] if rows else ('',)
        xs, values = series(rows, x, drawn[0])
        run = dict(run=label, work_dir=wd, metric=drawn[0], x=xs, values=values)
        if keys and len(drawn) > 1:
            cx, cv = series(rows, x, drawn[1])
            run['companion'] = dict(metric=drawn[1], x=cx, values=cv)
        runs.append(run)
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('work_dirs', nargs='+',
                   help='work dirs of tools/train.py runs, or (--x iter) tools/run_seeds.py '
                        'metrics files seedS.json')
    p.add_argument('--out', default='curves.png', help='PNG to write')
    p.add_argument('--x', choices=['minutes', 'iter'], default='minutes',
                   help='horizontal axis (default: training minutes)')
    p.add_argument('--labels', nargs='+', help='legend names, one per work dir')
    p.add_argument('--group', type=int, metavar='N',
                   help='runs given in groups of N (a config\'s seeds) share a colour')
    p.add_argument('--table', action='store_true',
                   help="also print each run's main metric at every validation (Markdown)")
    p.add_argument('--keys', nargs='+', metavar='KEY',
                   help='one or two training-log scalars to draw instead of the validation '
                        'metric (loss, grad_norm, teacher_entropy, ...; with --x iter)')
    add_json_argument(p, "each run's main metric at every validation")
    args = p.parse_args(argv)
    if args.keys and len(args.keys) > 2:
        p.error(f'--keys: one or two scalars (solid and dashed), got {len(args.keys)}')
    try:
        if args.table:
            print(curve_table(args.work_dirs, x=args.x, labels=args.labels, keys=args.keys))
        print(f'wrote {plot_curves(args.work_dirs, args.out, x=args.x, labels=args.labels, keys=args.keys, group=args.group)}')
        if args.json:
            write_result(args.json, curve_values(args.work_dirs, args.x, args.labels, args.keys),
                         x=args.x, plot=args.out, keys=args.keys)
    except (FileNotFoundError, ValueError) as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
