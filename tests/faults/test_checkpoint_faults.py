"""Checkpoint faults a training run must survive or report clearly.

- SIGKILL mid-run, then ``--resume``: the same final weights as an uninterrupted run.
- A checkpoint save interrupted midway: ``last_checkpoint`` still names a complete file.
- The disk full during a save: one line naming the file and the free space, no temp file.
- A truncated latest checkpoint: ``--resume`` continues from the newest intact one.
- ``tools/test.py`` with a checkpoint that does not match: exit 1 listing the keys
  (``--non-strict`` evaluates anyway).
- A checkpoint carrying pickled code: refused with a message saying so, code not run.
"""
import json
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mmengine.fileio import LocalBackend

import densevit  # noqa: F401  (allow-list for checkpoints)
from densevit.checkpoint.read import UnsafeCheckpointError, load_checkpoint_safely
from densevit.engine.checkpoint_hook import read_last_checkpoint

from tiny_checkpoints import save_evil_checkpoint, trained_checkpoint
from tiny_run import REPO, isolated, load_tool, subprocess_env, unique_names, write_config

NO_VAL = ['train_cfg.val_begin=1000']


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


def final_state(work_dir, it):
    return torch.load(Path(work_dir) / f'iter_{it}.pth', weights_only=True)['state_dict']


def test_sigkill_then_resume_ends_like_an_uninterrupted_run(train_tool, tmp_path):
    n = 8
    options = [f'train_cfg.max_iters={n}', 'default_hooks.checkpoint.interval=2', *NO_VAL]
    config = write_config(tmp_path)
    killed = tmp_path / 'killed'
    env = subprocess_env()
    proc = subprocess.Popen([sys.executable, str(REPO / 'tools/train.py'), config, '--work-dir',
                             str(killed), '--cfg-options', *options], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not (killed / 'last_checkpoint').exists():
            assert proc.poll() is None and time.time() < deadline, 'training ended early'
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / f'iter_{n}.pth').exists()  # it really died mid-run
    with isolated():  # the uninterrupted reference, same seed, one thread
        assert train_tool.main([config, '--work-dir', str(tmp_path / 'straight'),
                                '--cfg-options', *options, *unique_names()]) == 0
    # log dirs are named by the start second: the resumed run needs its own
    time.sleep(1.0)
    with isolated():
        assert train_tool.main([config, '--work-dir', str(killed), '--resume', '--cfg-options',
                                *options, *unique_names()]) == 0
    a, b = final_state(tmp_path / 'straight', n), final_state(killed, n)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-6, atol=1e-7, msg=k)


def test_interrupted_save_never_leaves_a_corrupt_latest_checkpoint(train_tool, tmp_path,
                                                                   monkeypatch):
    """The save at iteration 4 dies after writing half its bytes (as a kill would)."""
    put, calls = LocalBackend.put, []

    def dying_put(self, obj, filepath):
        calls.append(str(filepath))
        if len(calls) == 2:
            with open(filepath, 'wb') as f:
                f.write(obj[:len(obj) // 2])
            raise KeyboardInterrupt('killed while saving')
        return put(self, obj, filepath)

    config = write_config(tmp_path)
    work = tmp_path / 'w'
    # max_keep_ckpts=1: mmengine's own hook deletes iter_2.pth *before* writing iter_4.pth
    options = ['default_hooks.checkpoint.max_keep_ckpts=1', *NO_VAL]
    monkeypatch.setattr(LocalBackend, 'put', dying_put)
    with isolated():  # the tool reports the interrupt (exit 130) naming the intact file
        assert train_tool.main([config, '--work-dir', str(work), '--cfg-options', *options,
                                *unique_names()]) == 130
    monkeypatch.setattr(LocalBackend, 'put', put)
    latest = Path(read_last_checkpoint(work))
    assert latest.name == 'iter_2.pth'
    assert load_checkpoint_safely(latest)['meta']['iter'] == 2  # complete and loadable
    assert not (work / 'iter_4.pth').exists()  # only the temporary file is partial
    assert (work / 'iter_4.pth.tmp').exists()
    time.sleep(1.0)
    with isolated():  # --resume picks iter_2 and finishes; the stale temp file is removed
        assert train_tool.main([config, '--work-dir', str(work), '--resume', '--cfg-options',
                                *options, *unique_names()]) == 0
    assert load_checkpoint_safely(work / 'iter_4.pth')['meta']['iter'] == 4
    assert not list(work.glob('*.tmp')) and not (work / 'iter_2.pth').exists()


def test_disk_full_during_a_save_names_the_file_and_free_space(train_tool, tmp_path, monkeypatch,
                                                              capsys):
    """ENOSPC while writing iter_4.pth: one line naming the file and the free space, the
    previous checkpoint intact and named, no temporary file left."""
    import errno
    put, calls = LocalBackend.put, []

    def full_disk_put(self, obj, filepath):
        calls.append(str(filepath))
        if len(calls) == 2:
            with open(filepath, 'wb') as f:
                f.write(obj[:len(obj) // 3])
            raise OSError(errno.ENOSPC, 'No space left on device')
        return put(self, obj, filepath)

    work = tmp_path / 'w'
    monkeypatch.setattr(LocalBackend, 'put', full_disk_put)
    with isolated():
        rc = train_tool.main([write_config(tmp_path), '--work-dir', str(work), '--cfg-options',
                              *NO_VAL, *unique_names()])
    assert rc == 1
    err = capsys.readouterr().err
    assert f'could not write {work}/iter_4.pth: No space left on device (' in err
    assert 'MiB free in' in err and f'{work}/iter_2.pth is intact' in err
    assert 'Traceback' not in err
    assert not list(work.glob('*.tmp'))
    assert load_checkpoint_safely(work / 'iter_2.pth')['meta']['iter'] == 2


def test_resume_falls_back_to_the_newest_intact_checkpoint(train_tool, tmp_path, capsys):
    work = tmp_path / 'w'
    config = write_config(tmp_path)
    with isolated():
        assert train_tool.main([config, '--work-dir', str(work), '--resume', '--cfg-options',
                                *NO_VAL, *unique_names()]) == 0
    out = capsys.readouterr().out
    assert out.count(f'--resume: no checkpoint in {work}; starting from scratch') == 1
    assert 'Auto resumed' not in out
    latest = work / 'iter_4.pth'
    latest.write_bytes(latest.read_bytes()[:1000])  # a truncated latest checkpoint
    time.sleep(1.0)
    with isolated():
        assert train_tool.main([config, '--work-dir', str(work), '--resume', '--cfg-options',
                                *NO_VAL, *unique_names()]) == 0
    out = capsys.readouterr().out
    assert (f'--resume: the latest checkpoint {latest} is unreadable; resuming from '
            f'{work}/iter_2.pth, the newest intact one') in out
    assert load_checkpoint_safely(latest)['meta']['iter'] == 4  # written again, whole


def test_checkpoint_with_pickled_code_is_refused(tmp_path, capsys):
    marker = tmp_path / 'pwned'
    evil = tmp_path / 'evil.pth'
    save_evil_checkpoint(evil, marker)
    with pytest.raises(UnsafeCheckpointError,
                       match=r'^the global posix\.system: refusing to load .*evil\.pth') as e:
        load_checkpoint_safely(evil)
    # never advice to lift the protection (weights_only=False, or allow-listing the global)
    assert 'weights_only=False' not in str(e.value) and 'add_safe_globals' not in str(e.value)
    # the tools' load path (mmengine's load_from / resume) goes through it too
    config = write_config(tmp_path)
    test_tool = load_tool('tools/test.py')
    with isolated():
        rc = test_tool.main([config, str(evil), '--work-dir', str(tmp_path / 'w'),
                             '--cfg-options', *unique_names()])
    err = capsys.readouterr().err
    assert rc == 1 and 'arbitrary code' in err and 'Traceback' not in err  # one line
    from densevit.apis import init_model
    from densevit.checkpoint.read import read_checkpoint
    with pytest.raises(UnsafeCheckpointError):
        init_model(config, evil)
    # init_cfg Pretrained and the converters read through read_checkpoint: the same answer
    with pytest.raises(UnsafeCheckpointError, match=r'^the global posix\.system'):
        read_checkpoint(evil)
    convert = subprocess.run([sys.executable, str(REPO / 'tools/convert/checkpoint.py'), str(evil),
                              str(tmp_path / 'out.pth')], capture_output=True, text=True)
    assert convert.returncode == 1 and 'the global posix.system: refusing' in convert.stderr
    assert 'weights_only=False' not in convert.stderr
    assert not marker.exists()  # the payload never ran
    assert isinstance(UnsafeCheckpointError('x'), pickle.UnpicklingError)


def test_test_tool_loads_strictly_and_reports_in_one_line(tmp_path_factory, tmp_path, capsys):
    det = trained_checkpoint(tmp_path_factory, 'det')
    ckpt = torch.load(det['ckpt'], weights_only=True)
    dropped = next(k for k in ckpt['state_dict'] if k.endswith('class_embed.bias'))
    del ckpt['state_dict'][dropped]
    torch.save(ckpt, tmp_path / 'missing_one.pth')
    with isolated():
        rc = load_tool('tools/test.py').main([det['config'], str(tmp_path / 'missing_one.pth'),
                                              '--work-dir', str(tmp_path / 'work')])
    assert rc == 1
    err = capsys.readouterr().err
    assert 'missing_one.pth does not match the model: 1 missing' in err and dropped in err
    assert 'Traceback' not in err
    with isolated():  # experts: evaluate anyway, the mismatch reported
        rc = load_tool('tools/test.py').main([det['config'], str(tmp_path / 'missing_one.pth'),
                                              '--work-dir', str(tmp_path / 'work'), '--non-strict'])
    assert rc == 0


def test_save_pretrained_folder(tmp_path):
    """A Hugging Face ``save_pretrained`` folder reads as its weights file; a sharded one as
    its shards merged; a folder without weights is refused naming what it looked for."""
    from safetensors.torch import save_file

    from densevit.checkpoint.read import read_checkpoint

    a, b = torch.randn(2, 3), torch.randn(4)
    one = tmp_path / 'one'
    one.mkdir()
    save_file({'x.weight': a, 'y.bias': b}, str(one / 'model.safetensors'))
    got = read_checkpoint(one)
    assert set(got) == {'x.weight', 'y.bias'} and torch.equal(got['x.weight'], a)

    sharded = tmp_path / 'sharded'
    sharded.mkdir()
    save_file({'x.weight': a}, str(sharded / 'model-00001-of-00002.safetensors'))
    save_file({'y.bias': b}, str(sharded / 'model-00002-of-00002.safetensors'))
    (sharded / 'model.safetensors.index.json').write_text(json.dumps({'weight_map': {
        'x.weight': 'model-00001-of-00002.safetensors',
        'y.bias': 'model-00002-of-00002.safetensors'}}))
    got = read_checkpoint(sharded)
    assert torch.equal(got['x.weight'], a) and torch.equal(got['y.bias'], b)

    empty = tmp_path / 'empty'
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match='holds none of model.safetensors'):
        read_checkpoint(empty)
