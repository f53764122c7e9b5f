"""A work dir holds one run, resumes only that run, and survives Ctrl-C / SIGTERM.

- Two trainings on one work dir: the second is refused naming the first (a lock with
  the process id and host); a lock whose process is gone is replaced with a warning.
- ``--resume`` after the model or the optimizer's groups changed: refused before
  anything loads, naming what changed and pointing at ``load_from``.
- SIGINT / SIGTERM: a checkpoint at the iteration reached, one line saying how to
  resume, exit code 130 / 143; ``--resume`` then ends like an uninterrupted run.
- ``last_checkpoint`` is relative: a copied work dir resumes from its own files.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from densevit.engine.checkpoint_hook import read_last_checkpoint
from densevit.engine.work_dir_lock import (
    LOCK_NAME,
    WorkDirInUseError,
    acquire_work_dir,
    release_work_dir,
)

from tiny_run import REPO, isolated, load_tool, subprocess_env, unique_names, write_config

NO_VAL = ['train_cfg.val_begin=1000']


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


def _train_process(config, work, *options):
    return subprocess.Popen([sys.executable, str(REPO / 'tools/train.py'), config, '--work-dir',
                             str(work), '--cfg-options', *NO_VAL, *options],
                            env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc, seconds=240):
    deadline = time.time() + seconds
    while not Path(path).exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.time() < deadline, f'{path} never appeared'
        time.sleep(0.02)


def test_a_work_dir_in_use_is_refused_naming_the_other_run(train_tool, tmp_path, capsys):
    config, work = write_config(tmp_path), tmp_path / 'work'
    first = _train_process(config, work, 'train_cfg.max_iters=400')
    try:
        _wait_for(work / LOCK_NAME, first)
        deadline = time.time() + 240  # the first run's resolved config, dumped by its Runner
        while not list(work.glob('*.py')):
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.02)
        (resolved,) = work.glob('*.py')
        time.sleep(1.0)  # the Runner writes it more than once while it starts
        text = resolved.read_text()
        with isolated():
            rc = train_tool.main([config, '--work-dir', str(work), '--cfg-options', *NO_VAL,
                                  *unique_names()])
        err = capsys.readouterr().err
        assert rc == 1
        assert f'the work dir {work} is in use by another training run (process {first.pid} ' \
               f'on {socket.gethostname()}' in err and 'Traceback' not in err
        assert first.poll() is None  # the first run goes on, untouched
        assert resolved.read_text() == text  # not the second run's (its own experiment_name)
    finally:
        first.kill()
        first.wait()


def test_a_stale_lock_is_replaced_with_a_warning(tmp_path, log_lines):
    work = tmp_path / 'work'
    work.mkdir()
    gone = subprocess.Popen([sys.executable, '-c', 'pass'])
    gone.wait()  # a process id that no longer runs
    (work / LOCK_NAME).write_text(json.dumps(dict(pid=gone.pid, host=socket.gethostname(),
                                                  started=0, command='tools/train.py old')))
    from mmengine.logging import MMLogger
    lock = acquire_work_dir(str(work), MMLogger.get_current_instance())
    assert json.loads(Path(lock).read_text())['pid'] == os.getpid()
    assert any('stale lock' in text and str(gone.pid) in text for _, text in log_lines)
    # a live process on another host cannot be checked: refused, saying which file to delete
    Path(lock).write_text(json.dumps(dict(pid=1, host='elsewhere', started=0, command='x')))
    with pytest.raises(WorkDirInUseError, match=f'delete {work / LOCK_NAME}'):
        acquire_work_dir(str(work))
    release_work_dir(lock)  # not ours: left alone
    assert (work / LOCK_NAME).exists()


def _trained(train_tool, tmp_path, iters=4, *options):
    config, work = write_config(tmp_path), tmp_path / 'work'
    with isolated():
        assert train_tool.main([config, '--work-dir', str(work), '--cfg-options',
                                f'train_cfg.max_iters={iters}', *NO_VAL, *options,
                                *unique_names()]) == 0
    assert not (work / LOCK_NAME).exists()  # released at the end
    return config, work


@pytest.mark.parametrize('change, named', [
    ('model.bbox_head.num_queries=7', 'tensors changed shape (checkpoint -> model): '
                                      'bbox_head.query_embed.weight (5, 32) -> (7, 32)'),
    # mmengine's constructor with a paramwise_cfg gives each parameter a group
    ('optim_wrapper.paramwise_cfg.custom_keys.query_embed.decay_mult=0.0',
     'parameter groups, the checkpoint\'s 1 (a changed paramwise_cfg'),
    ('optim_wrapper.optimizer.weight_decay=0.5', 'parameter group 0 (backbone.'),
])
def test_resume_of_a_changed_model_is_refused_before_loading(train_tool, tmp_path, capsys,
                                                             change, named):
    config, work = _trained(train_tool, tmp_path, 2)
    with isolated():
        rc = train_tool.main([config, '--work-dir', str(work), '--resume', '--cfg-options',
                              'train_cfg.max_iters=4', *NO_VAL, change, *unique_names()])
    err = capsys.readouterr().err
    assert rc == 1 and 'Traceback' not in err, err
    assert named in err, err
    assert 'load_from=' in err and '--resume continues the same run' in err
    assert 'resumed' not in capsys.readouterr().out
    assert not (work / 'iter_4.pth').exists()  # nothing trained


def test_a_copied_work_dir_resumes_from_its_own_files(train_tool, tmp_path):
    config, work = _trained(train_tool, tmp_path, 2)
    assert (work / 'last_checkpoint').read_text().strip() == 'iter_2.pth'
    copy = tmp_path / 'copy'
    shutil.copytree(work, copy)
    assert read_last_checkpoint(copy) == str(copy / 'iter_2.pth')
    # a file written before the change holds the original's absolute path
    (copy / 'last_checkpoint').write_text(str(work / 'iter_2.pth'))
    assert read_last_checkpoint(copy) == str(copy / 'iter_2.pth')
    assert read_last_checkpoint(work) == str(work / 'iter_2.pth')


@pytest.mark.parametrize('signum, code', [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_the_iteration_reached_and_says_how_to_resume(train_tool, tmp_path,
                                                                     signum, code):
    n = 12
    config, work = write_config(tmp_path), tmp_path / 'work'
    options = [f'train_cfg.max_iters={n}', 'default_hooks.checkpoint.interval=100']
    proc = _train_process(config, work, *options, 'default_hooks.logger.interval=1')
    try:
        deadline = time.time() + 240  # the first logged iteration: training is under way
        while not list(work.glob('*/vis_data/scalars.json')):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.02)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    (line,) = [x for x in err.splitlines() if x.startswith('densevit:')]
    saved = Path(read_last_checkpoint(work))
    step = int(saved.stem.split('_')[1])
    assert 0 < step < n and 'Traceback' not in err
    assert f'training stopped at iteration {step}, saved as {saved}' in line
    assert 'continue with the same command and --resume' in line
    assert torch.load(saved, weights_only=True)['meta']['iter'] == step
    assert not (work / LOCK_NAME).exists()
    if signum == signal.SIGTERM:  # and the run resumes to the same end as a straight one
        with isolated():
            assert train_tool.main([config, '--work-dir', str(work), '--resume', '--cfg-options',
                                    *NO_VAL, *options, *unique_names()]) == 0
            assert train_tool.main([config, '--work-dir', str(tmp_path / 'straight'),
                                    '--cfg-options', *NO_VAL, *options, *unique_names()]) == 0
        a = torch.load(tmp_path / 'straight' / f'iter_{n}.pth', weights_only=True)['state_dict']
        b = torch.load(work / f'iter_{n}.pth', weights_only=True)['state_dict']
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-6, atol=1e-7, msg=k)
