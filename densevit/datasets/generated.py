"""Write a generated data folder once, atomically, under a lock.

Several processes (torchrun ranks) may ask for the same generated data at once.
:func:`generate_once` lets one of them write it into a temporary folder beside
the destination and rename the pieces into place, the completion marker last
(its presence means "complete"); the others wait on a file lock and then find
it. The arguments it was generated with are recorded beside the data, so a later
request with other arguments fails instead of silently reusing the old data.
"""
import contextlib
import json
import os
import os.path as osp
import shutil
import tempfile


@contextlib.contextmanager
def exclusive(lock_path):
    """Hold an exclusive lock on ``lock_path``; other processes block until it is released.

    flock is released by the OS if the holder dies, so a crashed rank never
    leaves a stale lock. Without fcntl (Windows) this does not lock; the
    rename-into-place of :func:`generate_once` still keeps a half-written folder
    invisible.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, 'a') as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def check_generated_with(record_file, generate, data_dir):
    """Fail if ``data_dir`` was generated with other arguments than ``generate``.

    ``record_file`` (JSON) is written beside the data when it is generated; a
    config whose ``generate`` arguments changed would otherwise silently train on
    the old images. Data generated before records existed is accepted as is.
    """
    if not osp.isfile(record_file):
        return
    with open(record_file) as f:
        recorded = json.load(f)
    wanted = json.loads(json.dumps(generate))  # tuples -> lists, as stored
    if recorded != wanted:
        changed = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
        raise ValueError(
            f'{data_dir} was generated with other shapes arguments than the config asks '
            f'(differing: {", ".join(f"{k}: {recorded.get(k)!r} -> {wanted.get(k)!r}" for k in changed)}); '
            f'delete {data_dir} (and {record_file}) to generate it again, or point data_root elsewhere')


def record_generated_with(record_file, generate):
    """Write ``generate`` to ``record_file`` (read back by :func:`check_generated_with`)."""
    with open(record_file, 'w') as f:
        json.dump(generate, f, sort_keys=True)


def generate_once(root, name, write, places, generate, record_file, lock_file):
    """Generate data under ``root`` unless it is complete already; safe across processes.

    Under the lock ``lock_file``: if the last destination of ``places`` exists
    (generated earlier, or by another process while this one waited), check it
    was made with ``generate`` and return False. Otherwise call ``write(tmp)``
    with a fresh temporary folder ``root/.<name>-*`` (same file system, so the
    renames are atomic), rename each ``(relative source, destination)`` of
    ``places`` into place in order (a destination folder left by a run killed
    mid-way is removed first), record ``generate`` in ``record_file`` just
    before the last rename, and return True. The temporary folder is always removed.
    """
    marker = places[-1][1]
    with exclusive(lock_file):
        if osp.exists(marker):
            check_generated_with(record_file, generate, marker)
            return False
        tmp = tempfile.mkdtemp(prefix=f'.{name}-', dir=root)
        try:
            write(tmp)
            for i, (src, dst) in enumerate(places):
                if i == len(places) - 1:
                    record_generated_with(record_file, generate)
                elif osp.isdir(dst):
                    shutil.rmtree(dst)  # left by a run killed mid-way
                os.replace(osp.join(tmp, src), dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True
