"""densevit.utils.provenance: what a kept result records about the run that measured it,
and the atomic JSON write."""
import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import torch

import densevit
from densevit.utils import provenance as prov

REPO = Path(__file__).resolve().parents[2]


def git(*args):
    return subprocess.run(['git', *args], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def threads():
    """Restore torch's thread count after a test sets it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_provenance_describes_this_run(monkeypatch, threads):
    if not (REPO / '.git').exists():
        pytest.skip('not a git checkout')
    script = REPO / 'tools' / 'analysis' / 'get_flops.py'
    monkeypatch.setattr(sys, 'argv', [str(script), str(REPO / 'configs' / 'x.py'), '--shape',
                                      '8', '8', '--json', '/elsewhere/out.json'])
    monkeypatch.setenv('OMP_NUM_THREADS', '3')
    torch.set_num_threads(1 if torch.get_num_threads() != 1 else 2)
    wanted_threads = torch.get_num_threads()

    p = prov.provenance()

    python = Path(sys.executable)
    python = python.relative_to(REPO).as_posix() if python.is_relative_to(REPO) else str(python)
    assert p['command'] == shlex.join([python, 'tools/analysis/get_flops.py', 'configs/x.py',
                                       '--shape', '8', '8', '--json', '/elsewhere/out.json'])
    assert p['commit'] == git('rev-parse', 'HEAD').strip()
    assert p['dirty'] is bool(git('status', '--porcelain', '--untracked-files=no').strip())
    assert p['torch_threads'] == wanted_threads
    assert p['omp_num_threads'] == '3'
    assert p['cpu_count'] == os.cpu_count()
    assert p['cpus_usable'] == len(os.sched_getaffinity(0))
    assert (p['python'], p['torch'], p['densevit']) == (
        platform.python_version(), torch.__version__, densevit.__version__)
    names = [line.split(':', 1)[1].strip() for line in Path('/proc/cpuinfo').read_text().splitlines()
             if line.startswith('model name')] if Path('/proc/cpuinfo').is_file() else []
    assert p['cpu_model'] == (names[0] if names else platform.processor() or None)
    when = datetime.fromisoformat(p['time_utc'])
    assert when.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - when) < timedelta(minutes=1)
    json.dumps(p)  # JSON-ready as it is


def test_outside_a_checkout_commit_is_none_and_paths_stay(monkeypatch, tmp_path):
    monkeypatch.setattr(prov, 'ROOT', tmp_path)  # no .git there
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.setattr(sys, 'argv', [str(REPO / 'tools' / 'test.py'), 'a b'])
    p = prov.provenance()
    assert p['commit'] is None and p['dirty'] is None and p['omp_num_threads'] is None
    assert p['command'] == shlex.join([sys.executable, str(REPO / 'tools' / 'test.py'), 'a b'])


def test_git_failure_or_timeout_gives_none(monkeypatch):
    def hang(cmd, **kwargs):
        assert kwargs.get('timeout'), 'git must run with a timeout'
        raise subprocess.TimeoutExpired(cmd, kwargs['timeout'])
    monkeypatch.setattr(prov.subprocess, 'run', hang)
    p = prov.provenance()
    assert p['commit'] is None and p['dirty'] is None


def test_unknown_cpu_model_is_none(monkeypatch):
    def no_cpuinfo(*args, **kwargs):
        raise FileNotFoundError('/proc/cpuinfo')
    monkeypatch.setattr(prov, 'open', no_cpuinfo, raising=False)
    monkeypatch.setattr(prov.platform, 'processor', lambda: '')
    assert prov.cpu_model() is None
    monkeypatch.setattr(prov.platform, 'processor', lambda: 'x86_64')
    assert prov.cpu_model() == 'x86_64'


def test_write_result_round_trips(tmp_path):
    results = dict(flops=np.int64(1234), ratio=np.float32(0.5), table=np.arange(3),
                   loss=torch.tensor(0.25), maps=torch.ones(2, 2), shape=(1, 3), nested=[{'a': 1}])
    path = tmp_path / 'new' / 'folder' / 'r.json'
    assert prov.write_result(path, results, config='configs/x.py', checkpoint=None) == str(path)
    data = json.loads(path.read_text())
    assert set(data) == {'provenance', 'results', 'config', 'checkpoint'}
    assert data['results'] == dict(flops=1234, ratio=0.5, table=[0, 1, 2], loss=0.25,
                                   maps=[[1.0, 1.0], [1.0, 1.0]], shape=[1, 3], nested=[{'a': 1}])
    assert data['config'] == 'configs/x.py' and data['checkpoint'] is None
    assert set(data['provenance']) == set(prov.provenance())
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain open would make it
    assert os.listdir(path.parent) == ['r.json']


def test_write_result_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / 'r.json'
    path.write_text('old')
    moves = []

    def failing_replace(src, dst):
        moves.append((Path(src), Path(dst)))
        assert json.loads(Path(src).read_text())['results'] == {'x': 1}  # complete before the move
        raise OSError('disk gone')
    monkeypatch.setattr(prov.os, 'replace', failing_replace)
    with pytest.raises(OSError, match='disk gone'):
        prov.write_result(path, {'x': 1})
    (src, dst), = moves
    assert src.parent == tmp_path and dst == path  # same folder: a rename, not a copy
    assert path.read_text() == 'old' and os.listdir(tmp_path) == ['r.json']  # no temp left

    with pytest.raises(TypeError, match='not JSON serializable'):
        prov.write_result(path, {'x': object()})
    assert path.read_text() == 'old' and os.listdir(tmp_path) == ['r.json']
