"""A progress bar over the images of validation and test runs.

mmengine logs a line every ``LoggerHook.interval`` iterations; a long test run
(5,000 COCO images, slide inference on ADE20K) otherwise shows nothing for
minutes. On a terminal the bar is mmengine's ``ProgressBar`` (redrawn in place:
images done / total, images per second, ETA); when the output is a file or a
pipe, carriage returns would fill it with junk, so a plain line is printed at
every ``log_fraction`` of the run instead. Only the main process prints; it
counts every process's images (``batch size x world size`` per step).
"""
import sys
import time

from mmengine.dist import get_world_size, is_main_process
from mmengine.hooks import Hook
from mmengine.utils import ProgressBar

from densevit.registry import HOOKS


def _batch_size(data_batch, outputs):
    if outputs is not None:
        return len(outputs)
    inputs = (data_batch or {}).get('inputs', ())
    return len(inputs) or 1


@HOOKS.register_module()
class ProgressBarHook(Hook):
    """Show progress of ``val`` and ``test`` loops (see the module docstring).

    Args:
        loops (Sequence[str]): which of 'val', 'test' to show.
        log_fraction (float): without a terminal, print a line every this
            fraction of the images.
        file: stream to write to (default ``sys.stdout``).
    """

    priority = 'VERY_LOW'

    def __init__(self, loops=('val', 'test'), log_fraction=0.1, file=None):
        self.loops = tuple(loops)
        self.log_fraction = log_fraction
        self.file = file
        self._state = None

    def _start(self, runner, mode):
        if mode not in self.loops or not is_main_process():
            return
        loader = runner.val_dataloader if mode == 'val' else runner.test_dataloader
        total = len(loader.dataset)
        stream = self.file or sys.stdout
        tty = hasattr(stream, 'isatty') and stream.isatty()
        bar = ProgressBar(total, file=stream) if tty else None
        self._state = dict(mode=mode, total=total, done=0, bar=bar, stream=stream,
                           next_line=self.log_fraction, start=time.perf_counter())

    def _step(self, n):
        state = self._state
        if state is None:
            return
        n = min(n * get_world_size(), state['total'] - state['done'])  # padded samples
        if n <= 0:
            return
        state['done'] += n
        if state['bar'] is not None:
            state['bar'].update(n)
            return
        fraction = state['done'] / max(state['total'], 1)
        if fraction >= state['next_line'] or state['done'] == state['total']:
            while state['next_line'] <= fraction:
                state['next_line'] += self.log_fraction
            elapsed = time.perf_counter() - state['start']
            state['stream'].write(f"{state['mode']}: {state['done']}/{state['total']} images, "
                                  f"{state['done'] / max(elapsed, 1e-9):.1f} img/s, "
                                  f'{elapsed:.0f}s\n')
            state['stream'].flush()

    def _end(self):
        if self._state is not None and self._state['bar'] is not None:
            self._state['stream'].write('\n')
            self._state['stream'].flush()
        self._state = None

    def before_val_epoch(self, runner):
        self._start(runner, 'val')

    def before_test_epoch(self, runner):
        self._start(runner, 'test')

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._step(_batch_size(data_batch, outputs))

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._step(_batch_size(data_batch, outputs))

    def after_val_epoch(self, runner, metrics=None):
        self._end()

    def after_test_epoch(self, runner, metrics=None):
        self._end()
