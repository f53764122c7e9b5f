"""One training run per work dir: a lock file naming the run that holds it.

Two trainings writing one work dir overwrite each other's ``iter_N.pth``, resolved
config and ``last_checkpoint`` (started together, they even write the same ``.tmp``).
``tools/train.py`` takes ``<work_dir>/.densevit.lock`` before it builds anything:

- the file is created complete and atomically (written under a temporary name, then
  hard-linked to the lock name, which fails if the lock exists), holding the process
  id, host, start time and command of its run;
- a lock held by a live run is refused with :class:`WorkDirInUseError` naming that run;
- a stale lock (its process no longer runs on this host, or it is this very process)
  is replaced with a warning; a lock from another host cannot be checked, so the
  message says which file to delete if that run is gone;
- the lock is removed when the run ends, however it ends short of ``kill -9``.

In a distributed run only the process of global rank 0 takes it.
"""
import json
import os
import os.path as osp
import socket
import sys
import time

LOCK_NAME = '.densevit.lock'


class WorkDirInUseError(RuntimeError):
    """Another live training run holds the work dir."""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _describe(owner):
    started = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(owner.get('started', 0)))
    return (f"process {owner.get('pid')} on {owner.get('host')}, started {started}: "
            f"{owner.get('command', '?')}")


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _create(path, owner):
    """Create ``path`` holding ``owner``; False if it exists already."""
    tmp = f'{path}.{owner["pid"]}.tmp'
    with open(tmp, 'w') as f:
        json.dump(owner, f)
    try:
        os.link(tmp, path)  # atomic, and refuses an existing name
        return True
    except FileExistsError:
        return False
    finally:
        os.remove(tmp)


def acquire_work_dir(work_dir, logger=None):
    """Take ``work_dir``'s lock for this process; returns the lock's path.

    Raises :class:`WorkDirInUseError` when a live run holds it, ``OSError`` (with the
    path) when the work dir cannot be created or written.
    """
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    owner = dict(pid=os.getpid(), host=socket.gethostname(), started=time.time(),
                 command=' '.join(sys.argv))
    for _ in range(3):
        if _create(path, owner):
            return path
        held = _read(path)
        if held is None:  # unreadable: a lock from before the atomic write, or damaged
            stale = 'unreadable'
        elif held.get('host') != owner['host']:
            raise WorkDirInUseError(
                f'the work dir {work_dir} is in use by another training run ({_describe(held)}); '
                f'two runs in one work dir overwrite each other\'s checkpoints. Use another '
                f'--work-dir, or, if that run is no longer running (it is on another host, so '
                f'densevit cannot check), delete {path}')
        elif held.get('pid') != owner['pid'] and _alive(held['pid']):
            raise WorkDirInUseError(
                f'the work dir {work_dir} is in use by another training run ({_describe(held)}); '
                f'two runs in one work dir overwrite each other\'s checkpoints. Wait for it to '
                f'end, stop it, or use another --work-dir')
        else:
            stale = f'left by {_describe(held)}, which no longer runs'
        if logger is not None:
            logger.warning(f'removing the stale lock {path} ({stale})')
        try:
            os.remove(path)
        except FileNotFoundError:
            pass  # another starting run removed it first: try again
    raise WorkDirInUseError(f'could not take the lock {path}: other runs keep taking it')


def release_work_dir(path):
    """Remove the lock at ``path`` if this process still holds it."""
    held = _read(path)
    if held is not None and held.get('pid') == os.getpid() and \
            held.get('host') == socket.gethostname():
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def is_global_rank_zero(launcher):
    """Whether this process is global rank 0, before the process group exists."""
    if launcher in (None, 'none'):
        return True
    for key in ('RANK', 'SLURM_PROCID'):
        if key in os.environ:
            return int(os.environ[key]) == 0
    return True
