"""Faults of a 2-process (gloo) training run on this CPU.

- A rank killed with SIGKILL: the other one stops within seconds with one line naming the
  rank that is gone, the last complete checkpoint and ``--resume`` (plain launch), or is
  stopped by torchrun, which names the failed rank (``tools/dist_train.sh``).
- A rank that hangs (SIGSTOP): the other one stops after the collective timeout, here
  20 s (``DENSEVIT_DIST_TIMEOUT``), instead of torch's 30 minutes.
- After the kill the last complete checkpoint loads, and ``--resume`` on 2 processes ends
  with the same weights, bit for bit, as an uninterrupted 2-process run.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import densevit  # noqa: F401  (allow-list for checkpoints)
from densevit.checkpoint.read import load_checkpoint_safely
from densevit.engine.checkpoint_hook import read_last_checkpoint
from densevit.engine.dist_faults import TIMEOUT_ENV, collective_timeout

from tiny_run import REPO, free_port, run_launcher, subprocess_env, write_config

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU (gloo) path')
N = 24  # iterations; a checkpoint every 2
OPTIONS = ['--cfg-options', f'train_cfg.max_iters={N}', 'default_hooks.checkpoint.interval=2',
           'train_cfg.val_begin=1000']


def _env(**extra):
    return subprocess_env(**extra)


def launch_plain(config, work, **env):
    """Two ``tools/train.py --launcher pytorch`` processes started by hand (no torchrun);
    their output goes to ``<work>.rank{r}.log``."""
    port, procs = str(free_port()), []
    for rank in (0, 1):
        e = _env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
                 MASTER_PORT=port, **env)
        with open(f'{work}.rank{rank}.log', 'w') as log:
            procs.append(subprocess.Popen(
                [sys.executable, str(REPO / 'tools/train.py'), config, '--launcher', 'pytorch',
                 '--work-dir', str(work), *OPTIONS], env=e, stdout=log, stderr=log))
    return procs


def wait_for_checkpoint(work, procs, limit=240):
    deadline = time.time() + limit
    while not (work / 'last_checkpoint').exists():
        assert all(p.poll() is None for p in procs), 'training ended early'
        assert time.time() < deadline, 'no checkpoint in time'
        time.sleep(0.02)


def hit(victim, sig, survivor, limit):
    """Send ``sig`` to ``victim``; seconds until ``survivor`` exits (killed after ``limit``)."""
    start = time.time()
    os.kill(victim, sig)
    try:
        survivor.wait(limit)
    except subprocess.TimeoutExpired:
        survivor.kill()
        pytest.fail(f'the surviving process still ran {limit} s after the fault')
    return time.time() - start


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def densevit_lines(log):
    return [x for x in Path(log).read_text().splitlines() if x.startswith('densevit: ')]


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp('dist_faults'))


@pytest.fixture(scope='module')
def killed(config, tmp_path_factory):
    """A plain 2-process launch whose rank 1 got SIGKILL after the first checkpoint."""
    work = tmp_path_factory.mktemp('killed') / 'work'
    procs = launch_plain(config, work)
    try:
        wait_for_checkpoint(work, procs)
        seconds = hit(procs[1].pid, signal.SIGKILL, procs[0], limit=120)
    finally:
        stop_all(procs)
    return dict(work=work, seconds=seconds, rc=procs[0].returncode, log=f'{work}.rank0.log')


def test_sigkilled_rank_stops_the_other_with_a_clear_error(killed):
    assert killed['seconds'] < 30 and killed['rc'] == 1, Path(killed['log']).read_text()[-2000:]
    (line,) = densevit_lines(killed['log'])
    assert 'rank 0 of 2' in line and 'rank 1 is gone' in line
    ckpt = read_last_checkpoint(killed['work'])
    assert f'The last complete checkpoint is {ckpt}' in line and '--resume' in line
    assert not (killed['work'] / f'iter_{N}.pth').exists()  # it really stopped mid-run


def test_resume_on_two_processes_ends_like_an_uninterrupted_run(killed, config, tmp_path):
    ckpt = read_last_checkpoint(killed['work'])
    assert load_checkpoint_safely(ckpt)['meta']['iter'] < N
    straight = tmp_path / 'straight'
    run_launcher('dist_train.sh', config, 2, '--work-dir', straight, *OPTIONS, cwd=tmp_path)
    time.sleep(1.0)  # log dirs are named by the start second: the resumed run needs its own
    run_launcher('dist_train.sh', config, 2, '--work-dir', killed['work'], '--resume', *OPTIONS,
                 cwd=tmp_path)
    a, b = (torch.load(w / f'iter_{N}.pth', weights_only=True)['state_dict']
            for w in (straight, killed['work']))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_hung_rank_stops_the_other_after_the_timeout(config, tmp_path):
    work = tmp_path / 'work'
    procs = launch_plain(config, work, **{TIMEOUT_ENV: '20'})
    try:
        wait_for_checkpoint(work, procs)
        seconds = hit(procs[1].pid, signal.SIGSTOP, procs[0], limit=90)
    finally:
        stop_all(procs)
    log = f'{work}.rank0.log'
    assert 18 < seconds < 50 and procs[0].returncode == 1, Path(log).read_text()[-2000:]
    (line,) = densevit_lines(log)
    assert 'no answer from rank 1 within 20 s' in line and '--resume' in line


def worker_pid(launcher_pid, rank):
    """The pid of torchrun's worker of ``rank`` (a child of the launcher)."""
    for d in Path('/proc').iterdir():
        try:
            ppid = int((d / 'stat').read_text().rsplit(')', 1)[1].split()[1])
            if ppid == launcher_pid and f'RANK={rank}'.encode() in (d / 'environ').read_bytes():
                return int(d.name)
        except (OSError, ValueError, IndexError):
            continue
    raise AssertionError(f'no worker of rank {rank} under pid {launcher_pid}')


def test_torchrun_stops_the_survivor_and_names_the_failed_rank(config, tmp_path):
    work, log = tmp_path / 'work', tmp_path / 'torchrun.log'
    with open(log, 'w') as f:
        proc = subprocess.Popen(['bash', str(REPO / 'tools/dist_train.sh'), config, '2',
                                 '--work-dir', str(work), *OPTIONS],
                                env=_env(PORT=str(free_port())), stdout=f, stderr=f)
    try:
        wait_for_checkpoint(work, [proc])
        seconds = hit(worker_pid(proc.pid, 1), signal.SIGKILL, proc, limit=120)
    finally:
        stop_all([proc])
    out = log.read_text()
    assert seconds < 30 and proc.returncode != 0, out[-3000:]
    assert 'rank      : 1 (local_rank: 1)' in out and '(SIGKILL)' in out
    # rank 0 says it either from the failed collective or from torchrun's SIGTERM
    assert any(x.startswith('densevit: rank 0') and '--resume' in x for x in densevit_lines(log))


def test_collective_timeout_from_environment_or_config(monkeypatch):
    cfg = dict(env_cfg=dict(dist_cfg=dict(backend='gloo', timeout=45)))
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert collective_timeout(cfg) == 45 and collective_timeout({}, default=120) == 120
    monkeypatch.setenv(TIMEOUT_ENV, '7.5')
    assert collective_timeout(cfg) == 7.5
    monkeypatch.setenv(TIMEOUT_ENV, 'soon')
    with pytest.raises(ValueError, match=f'{TIMEOUT_ENV} must be a number of seconds'):
        collective_timeout(cfg)
    monkeypatch.setenv(TIMEOUT_ENV, '0')
    with pytest.raises(ValueError, match='positive'):
        collective_timeout(cfg)
