"""Removed: ``tools/train.py --minutes`` trains on a clock now. This path forwards until the
next release: ``train_curve.py CONFIG [opts]`` runs ``tools/train.py CONFIG --minutes 20
--eval-every 2 --work-dir work_dirs/train_curve [opts]`` (its old defaults), and
``--plot-only DIRS --out F`` runs ``tools/analysis/plot_curves.py DIRS --out F``."""
import sys

from densevit.utils.moved import forward


def new_command(argv):
    """(new script, its arguments) for the old command line ``argv``."""
    if '--plot-only' in argv:
        return 'tools/analysis/plot_curves.py', [a for a in argv if a != '--plot-only']
    args = list(argv)
    if '--out' in args:  # the curve is always <work-dir>/curve.png now
        i = args.index('--out')
        del args[i:i + 2]
    args = [a for a in args if not a.startswith('--out=')]
    for flag, default in (('--minutes', '20'), ('--eval-every', '2'),
                          ('--work-dir', 'work_dirs/train_curve')):
        if not any(a == flag or a.startswith(flag + '=') for a in args):
            args += [flag, default]
    return 'tools/train.py', args


if __name__ == '__main__':
    script, sys.argv[1:] = new_command(sys.argv[1:])
    forward(__file__, script)
