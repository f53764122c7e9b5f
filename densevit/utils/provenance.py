"""Where a measured figure came from, kept beside the figure.

:func:`provenance` describes the running process: its command line, the densevit commit,
the CPU and thread counts, the versions and the time. :func:`write_result` writes a
script's numbers together with that description as one JSON file, which the docs keep
beside the text that quotes them (``docs/results/``). :func:`add_json_argument` gives a
measuring script its ``--json FILE`` option.
"""
import json
import os
import platform
import shlex
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout densevit is imported from


def _in_checkout():
    return (ROOT / '.git').exists()  # a folder, or a file in a worktree


def _repo_relative(arg):
    """``arg`` relative to the repository root if it names a path inside it, else unchanged."""
    if not arg or arg.startswith('-') or not _in_checkout():
        return arg
    for path in (Path(os.path.abspath(arg)), Path(arg).resolve()):  # links kept, then followed
        if path.is_relative_to(ROOT):
            return path.relative_to(ROOT).as_posix()
    return arg


def command_line(argv=None):
    """``sys.executable`` and ``argv`` (default ``sys.argv``) as one shell command; the
    executable, the script and any other absolute path inside the repository are written
    relative to its root (other arguments as given)."""
    argv = list(sys.argv if argv is None else argv)
    words = [sys.executable, *argv[:1]]
    words = [_repo_relative(w) for w in words] + [
        _repo_relative(a) if os.path.isabs(a) else a for a in argv[1:]]
    return shlex.join(words)


def _git(*args):
    """Output of ``git args`` run in the checkout, None outside one or on any failure."""
    if not _in_checkout():
        return None
    try:
        out = subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def cpu_model():
    """The CPU's name: /proc/cpuinfo's ``model name``, else ``platform.processor()``,
    else None."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def provenance(argv=None):
    """What produced a result, as a JSON-ready dict.

    Keys: ``command`` (see :func:`command_line`), ``commit`` (``git rev-parse HEAD`` of
    the densevit checkout; None outside one), ``dirty`` (whether ``git status
    --porcelain --untracked-files=no`` lists anything: tracked files edited, so the commit
    alone does not give the code; untracked files, such as the results being written, do
    not count; None outside a checkout), ``cpu_model`` (None when unknown),
    ``cpu_count`` (``os.cpu_count()``), ``cpus_usable`` (the CPUs this process may run
    on), ``torch_threads`` (``torch.get_num_threads()`` now), ``omp_num_threads`` (the
    environment variable, None when unset), ``python``, ``torch`` and ``densevit``
    versions and ``time_utc`` (ISO 8601).
    """
    import torch

    import densevit
    commit = _git('rev-parse', 'HEAD')
    status = _git('status', '--porcelain', '--untracked-files=no') if commit else None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else None
    return dict(
        command=command_line(argv),
        commit=commit.strip() if commit else None,
        dirty=bool(status.strip()) if status is not None else None,
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        cpus_usable=usable,
        torch_threads=torch.get_num_threads(),
        omp_num_threads=os.environ.get('OMP_NUM_THREADS'),
        python=platform.python_version(),
        torch=torch.__version__,
        densevit=densevit.__version__,
        time_utc=datetime.now(timezone.utc).isoformat(timespec='seconds'),
    )


def _plain(obj):
    """JSON form of what ``json`` does not know: numpy / torch scalars and arrays, paths."""
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    for method in ('item', 'tolist'):  # a scalar first: tolist() of a 0-d array is a number
        try:
            return getattr(obj, method)()
        except (AttributeError, TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(f'{type(obj).__name__} is not JSON serializable')


def write_result(path, results, **extra):
    """Write ``{'provenance': provenance(), 'results': results, **extra}`` to ``path``.

    Atomic: written to a temporary file in the same folder, then moved over ``path``
    (``os.replace``), so a reader never sees half a file and a failed write leaves the old
    one. Parent folders are created. Returns ``path``.
    """
    data = dict(provenance=provenance(), results=results, **extra)
    text = json.dumps(data, indent=2, default=_plain) + '\n'
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'.{path.name}.{uuid.uuid4().hex[:8]}.tmp')
    try:
        with open(tmp, 'x') as f:  # mode follows the umask, as a plain open would
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return str(path)


def add_json_argument(parser, what='the numbers it prints', default=None):
    """Give ``parser`` a ``--json FILE`` option: the file :func:`write_result` writes."""
    where = f' (default: {default})' if default else ''
    parser.add_argument('--json', metavar='FILE', help=f'also write {what} here as JSON, with '
                        f'the command, commit, CPU and thread count that produced them{where}')
    return parser
