"""``tools/train.py --resume`` continues a run exactly, and checkpoints load with weights_only=True.

Exactly: the tiny DETR trains with dropout, so the resumed run must also continue torch's
random numbers where the checkpoint left them (``densevit/engine/rng_state_hook.py``).

Checkpoint requirement: on torch >= 2.6 (``torch.load`` defaults to ``weights_only=True``)
mmengine's resume must restore model, optimizer, parameter schedulers and the
iteration from a checkpoint, with densevit's allow-list and never ``weights_only=False``.
"""
import json
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer

from tiny_run import isolated, load_tool, scalar_records, train_losses, unique_names, write_config

N = 6
# A validation and a checkpoint every 3 iterations. The schedule (LinearLR warm-up to 2,
# x0.1 at 3) does not depend on max_iters, so a 3-iteration run is the first half of a
# 6-iteration one.
OPTIONS = ['default_hooks.checkpoint.interval=3']
# The tiny DETR with dropout: training draws random numbers from torch's generator at every
# iteration (as drop path, MAE's masks, DINO's denoising noise do), and each validation's
# data loader draws a worker seed from it.
DROPOUT = 'model = dict(bbox_head=dict(transformer=dict(dropout=0.1)))\n'


def train(train_tool, config, work_dir, max_iters, *extra, val_interval=3):
    rc = train_tool.main([config, '--work-dir', str(work_dir), *extra, '--cfg-options',
                          f'train_cfg.max_iters={max_iters}', f'train_cfg.val_interval={val_interval}',
                          *OPTIONS, *unique_names()])
    assert rc == 0


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """An uninterrupted 6-iteration run, and a 3-iteration run resumed to 6 (auto resume);
    both validate after iterations 3 and 6."""
    root = tmp_path_factory.mktemp('resume')
    train_tool = load_tool('tools/train.py')
    config = write_config(root, extra=DROPOUT)
    with isolated():
        train(train_tool, config, root / 'straight', N)
    with isolated():
        train(train_tool, config, root / 'interrupted', N // 2)
        assert (root / 'interrupted' / 'iter_3.pth').is_file()
        assert not (root / 'interrupted' / 'iter_6.pth').exists()
    # log dirs are named by the start second: give the resumed process its own
    (stamp,) = [p.name for p in (root / 'interrupted').iterdir() if p.is_dir()]
    while time.strftime('%Y%m%d_%H%M%S') <= stamp:
        time.sleep(0.05)
    with isolated():
        train(train_tool, config, root / 'interrupted', N, '--resume')
    return root / 'straight', root / 'interrupted'


def test_resumed_run_logs_the_same_losses(runs):
    straight, resumed = runs
    a, b = train_losses(straight), train_losses(resumed)
    assert sorted(a) == sorted(b) == list(range(1, N + 1))
    # the resumed process itself logged 4..6 (it did not retrain 1..3)
    first, second = sorted(resumed.glob('*/vis_data/scalars.json'))  # one per process
    steps = [[json.loads(line)['step'] for line in log.read_text().splitlines() if 'loss' in line]
             for log in (first, second)]
    assert steps == [[1, 2, 3], [4, 5, 6]]
    for it in range(1, N + 1):
        assert b[it] == pytest.approx(a[it], rel=1e-6, abs=1e-7), f'iteration {it}'


def test_validating_does_not_change_the_training(runs, tmp_path):
    """The same run without its validations draws the same dropout masks (RngStateHook
    runs validation on a fork of torch's generator) and logs the same losses."""
    with isolated():
        train(load_tool('tools/train.py'), write_config(tmp_path, extra=DROPOUT),
              tmp_path / 'unvalidated', N, val_interval=1000)
    a, b = train_losses(runs[0]), train_losses(tmp_path / 'unvalidated')
    assert sorted(a) == sorted(b) == list(range(1, N + 1))
    for it in range(1, N + 1):
        assert b[it] == pytest.approx(a[it], rel=1e-6, abs=1e-7), f'iteration {it}'


EPOCHS = DROPOUT + """
train_dataloader = dict(dataset=dict(data_root=data_root),
                        sampler=dict(_delete_=True, type='DefaultSampler', shuffle=True))
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs=2, val_interval=1)
default_hooks = dict(checkpoint=dict(by_epoch=True, interval=1))
"""


def test_an_epoch_based_run_resumes_exactly(tmp_path):
    """Epochs of 4 iterations, a validation after each; not replayed on resume, so the
    generators (torch's for dropout, numpy's for the pipeline's flips, in the main process
    here) are set back when the second epoch starts."""
    train_tool, config = load_tool('tools/train.py'), write_config(tmp_path, extra=EPOCHS)

    def run(name, epochs, *extra):
        with isolated():
            assert train_tool.main([config, '--work-dir', str(tmp_path / name), *extra,
                                    '--cfg-options', f'train_cfg.max_epochs={epochs}',
                                    *unique_names()]) == 0

    run('straight', 2)
    run('cut', 1)
    time.sleep(1.0)  # log dirs are named by the start second
    run('cut', 2, '--resume')
    a, b = (torch.load(tmp_path / wd / 'epoch_2.pth', weights_only=True)['state_dict']
            for wd in ('straight', 'cut'))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-6, atol=1e-7, msg=k)


def test_checkpoint_keeps_the_generator_state(runs):
    ckpt = torch.load(runs[1] / 'iter_3.pth', map_location='cpu', weights_only=True)
    state = ckpt['torch_rng_state']
    assert state['cpu'].dtype == torch.uint8
    assert state['cpu'].numel() == torch.get_rng_state().numel()
    assert state['numpy'][0] == 'MT19937' and state['numpy'][1].shape == (624,)
    assert state['python'][0] == 3 and len(state['python'][1]) == 625


def test_resumed_run_restores_scheduler(runs):
    straight, resumed = runs
    lrs = [{r['step']: r['lr'] for r in scalar_records(wd) if 'lr' in r} for wd in runs]
    assert lrs[0] == pytest.approx(lrs[1])
    # the x0.1 step at iteration 3 survived the interruption
    assert lrs[1][4] == pytest.approx(0.1 * lrs[1][3])


def test_resumed_run_ends_with_the_same_weights_and_optimizer(runs):
    a, b = (torch.load(wd / f'iter_{N}.pth', map_location='cpu', weights_only=True)
            for wd in runs)
    assert a['meta']['iter'] == b['meta']['iter'] == N
    assert a['state_dict'].keys() == b['state_dict'].keys()
    for k in a['state_dict']:
        torch.testing.assert_close(b['state_dict'][k], a['state_dict'][k], rtol=1e-6, atol=1e-7,
                                   msg=k)
    sa, sb = a['optimizer']['state'], b['optimizer']['state']
    assert sa.keys() == sb.keys()
    for i in sa:
        assert int(sa[i]['step']) == int(sb[i]['step']) == N
        torch.testing.assert_close(sb[i]['exp_avg_sq'], sa[i]['exp_avg_sq'], rtol=1e-5, atol=1e-9)
    assert a['param_schedulers'] == b['param_schedulers']


def test_checkpoint_loads_weights_only(runs):
    """What mmengine's resume does on torch 2.13: torch.load's default is weights_only=True."""
    ckpt = torch.load(runs[0] / 'iter_3.pth', map_location='cpu', weights_only=True)
    assert ckpt['meta']['iter'] == 3
    buffers = ckpt['message_hub']['log_scalars']
    assert buffers and all(isinstance(b, HistoryBuffer) for b in buffers.values())
    # the statistics methods pickled with each buffer came back and work
    loss = buffers['train/loss']
    assert loss.statistics('current') == loss.current() and np.isfinite(loss.mean())


def test_checkpoint_needs_densevit_allow_list(runs):
    """Without densevit imported, torch refuses the same file (so the allow-list is what
    makes the test above pass). A bare interpreter: only torch is imported."""
    code = textwrap.dedent(f"""
        import pickle, sys, torch
        try:
            torch.load({str(runs[0] / 'iter_3.pth')!r}, map_location='cpu', weights_only=True)
        except pickle.UnpicklingError as e:
            print(e, file=sys.stderr)
            sys.exit(3)
    """)
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert 'Unsupported global' in proc.stderr


class _GetattrReduce:
    """Pickles as ``getattr(obj, name)``: the shape a HistoryBuffer's methods take."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def __reduce__(self):
        return getattr, (self.obj, self.name)


def test_getattr_is_allowed_only_for_history_buffer_methods(tmp_path):
    import densevit  # noqa: F401  (registers the allow-list)
    good = tmp_path / 'good.pth'
    torch.save({'m': _GetattrReduce(HistoryBuffer, 'mean')}, good)
    assert torch.load(good, weights_only=True)['m'] is HistoryBuffer.mean
    for obj, name in [(HistoryBuffer, '__init__'), (HistoryBuffer, 'update'),
                      (np.ndarray, 'tofile')]:
        bad = tmp_path / 'bad.pth'
        torch.save({'m': _GetattrReduce(obj, name)}, bad)
        with pytest.raises(pickle.UnpicklingError, match=name):
            torch.load(bad, weights_only=True)
