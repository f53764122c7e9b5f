"""Keep an old script path working for one release after the script moved.

A forwarder left at the old path is three lines::

    from densevit.utils.moved import forward

    if __name__ == '__main__':
        forward(__file__, 'benchmarks/matcher_share.py')
"""
import runpy
import sys
from pathlib import Path


def forward(old_file, new_path):
    """Say on stderr that ``old_file`` moved, then run ``new_path`` as ``__main__``.

    Args:
        old_file (str): the forwarder's ``__file__``.
        new_path (str): the new script, relative to the repository root (the
            nearest folder above ``old_file`` that holds it).

    The new script sees the same command-line arguments (``sys.argv[0]`` is its
    own path) and its ``SystemExit`` (exit status) passes through unchanged.
    """
    old = Path(old_file).resolve()
    root = next((p for p in old.parents if (p / new_path).is_file()), None)
    if root is None:
        raise FileNotFoundError(f'{old.name} has moved to {new_path}, which is not found '
                                f'in any folder above {old.parent}')
    print(f'{old.relative_to(root).as_posix()} has moved to {new_path}; '
          'this path forwards until the next release', file=sys.stderr)
    target = str(root / new_path)
    sys.argv[0] = target
    runpy.run_path(target, run_name='__main__')


# config folders that moved, old prefix -> new prefix (accepted until the next release)
MOVED_CONFIGS = {'configs/vit_pe/': 'configs/studies/vit_pe/',
                 'configs/quickstart/seg_trials/': 'configs/studies/seg_trials/'}


def resolve_config(path):
    """``path``, or where a config that moved now lives (saying so on stderr).

    A path that exists, or that matches no moved folder, comes back unchanged: a
    missing config still fails where it is read, naming the path.
    """
    if Path(path).exists():
        return path
    posix = Path(path).as_posix()
    for old, new in MOVED_CONFIGS.items():
        at = posix.find(old)
        if at >= 0 and (at == 0 or posix[at - 1] == '/'):
            moved = posix[:at] + new + posix[at + len(old):]
            if Path(moved).exists():
                print(f'{old} has moved to {new}; reading {moved} (the old path is accepted '
                      'until the next release)', file=sys.stderr)
                return moved
    return path
