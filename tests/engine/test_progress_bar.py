"""ProgressBarHook: images done / total during val and test, on a terminal or in a log."""
import io
from types import SimpleNamespace

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
