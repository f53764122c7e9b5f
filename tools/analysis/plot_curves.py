"""Draw several clocked training runs into one picture.

    python tools/analysis/plot_curves.py work_dirs/curves/* --out docs/quickstart_detection.png

Each WORK_DIR holds the ``training_clock.csv`` that ``tools/train.py --minutes`` writes.
"""
import argparse
import sys

from densevit.visualization.training_curve import plot_curves


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('work_dirs', nargs='+', help='work dirs of tools/train.py --minutes runs')
    p.add_argument('--out', default='curves.png', help='PNG to write')
    args = p.parse_args(argv)
    try:
        print(f'wrote {plot_curves(args.work_dirs, args.out)}')
    except FileNotFoundError as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
