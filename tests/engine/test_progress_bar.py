"""ProgressBarHook: a training line every few seconds; images done / total during val and
test, on a terminal or in a log."""
import io
from types import SimpleNamespace

import torch

from densevit.engine.progress_bar_hook import ProgressBarHook


class Terminal(io.StringIO):
    def isatty(self):
        return True


def fake_runner(num_images):
    loader = SimpleNamespace(dataset=list(range(num_images)))
    return SimpleNamespace(val_dataloader=loader, test_dataloader=loader)


def run_test_loop(hook, runner, batches):
    hook.before_test_epoch(runner)
    for i, n in enumerate(batches):
        hook.after_test_iter(runner, i, outputs=[None] * n)
    hook.after_test_epoch(runner)


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    hook = ProgressBarHook(log_fraction=0.5, file=out)
    run_test_loop(hook, fake_runner(5), [2, 2, 1])
    lines = out.getvalue().splitlines()
    assert [line.split(' images')[0] for line in lines] == ['test: 4/5', 'test: 5/5']
    assert '\r' not in out.getvalue()


def test_redrawn_bar_on_a_terminal():
    out = Terminal()
    hook = ProgressBarHook(file=out)
    runner = fake_runner(4)
    hook.before_val_epoch(runner)
    for i in range(2):
        hook.after_val_iter(runner, i, outputs=[None, None])
    hook.after_val_epoch(runner)
    text = out.getvalue()
    assert '\r' in text and '4/4' in text and text.endswith('\n')


def test_loops_not_selected_print_nothing():
    out = io.StringIO()
    run_test_loop(ProgressBarHook(loops=('val',), file=out), fake_runner(3), [3])
    assert out.getvalue() == ''


def test_training_line_every_interval(monkeypatch):
    now = [0.0]
    monkeypatch.setattr('densevit.engine.progress_bar_hook.time.perf_counter', lambda: now[0])
    out = io.StringIO()
    hook = ProgressBarHook(interval_s=5.0, file=out)
    info = {'eta': 3725.0}
    runner = SimpleNamespace(iter=0, max_iters=100,
                             message_hub=SimpleNamespace(get_info=info.get))
    hook.before_train(runner)
    for i in range(12):  # 2 s per iteration: lines after iteration 1, then every 3rd (6 s)
        now[0] += 2.0
        runner.iter = i
        hook.after_train_iter(runner, i, outputs={'loss': torch.tensor(1.23456)})
    lines = out.getvalue().splitlines()
    assert lines[0] == 'train: iter 1/100, loss 1.2346, 2.00 s/it, eta 1:02:05'
    assert [line.split(',')[0] for line in lines] == [
        'train: iter 1/100', 'train: iter 4/100', 'train: iter 7/100', 'train: iter 10/100']
    # a clocked run has no iteration limit to show; validation time is not training time
    out.truncate(0), out.seek(0)
    runner.max_iters = 10 ** 8
    runner.val_dataloader = SimpleNamespace(dataset=[0])
    hook.before_val_epoch(runner)
    now[0] += 100
    hook.after_val_epoch(runner)
    out.truncate(0), out.seek(0)  # the val line
    now[0] += 10
    runner.iter = 12
    hook.after_train_iter(runner, 12, outputs={'loss': torch.tensor(1.0)})
    # iterations 11, 12 and 13 in 2 + 2 + 10 s of training (the 100 s validation left out)
    assert out.getvalue().startswith('train: iter 13, loss 1.0000, 4.67 s/it')
