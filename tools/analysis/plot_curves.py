"""Draw the validation metric of several training runs into one picture.

    python tools/analysis/plot_curves.py work_dirs/curves/* --out curves.png
    python tools/analysis/plot_curves.py work_dirs/seed_* --x iter --out seeds.png
    python tools/analysis/plot_curves.py work_dirs/seed_* --x iter --table   # also print a table

Against training minutes, each WORK_DIR holds the ``training_clock.csv`` that
``tools/train.py --minutes`` writes; against iterations (``--x iter``), any
``tools/train.py`` work dir will do (its ``*/vis_data/scalars.json``).
"""
import argparse
import sys

from densevit.visualization.training_curve import curve_table, plot_curves


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('work_dirs', nargs='+', help='work dirs of tools/train.py --minutes runs')
    p.add_argument('--out', default='curves.png', help='PNG to write')
    p.add_argument('--x', choices=['minutes', 'iter'], default='minutes',
                   help='horizontal axis (default: training minutes)')
    p.add_argument('--labels', nargs='+', help='legend names, one per work dir')
    p.add_argument('--table', action='store_true',
                   help="also print each run's main metric at every validation (Markdown)")
    args = p.parse_args(argv)
    try:
        if args.table:
            print(curve_table(args.work_dirs, x=args.x, labels=args.labels))
        print(f'wrote {plot_curves(args.work_dirs, args.out, x=args.x, labels=args.labels)}')
    except (FileNotFoundError, ValueError) as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
