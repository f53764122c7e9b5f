"""Live progress of training, validation and test runs.

mmengine logs a line every ``LoggerHook.interval`` iterations; on a CPU that can
be minutes of silence, and a long test run (5,000 COCO images, slide inference
on ADE20K) shows nothing at all until it ends.

Training: a line at most every ``interval_s`` seconds (iteration, loss, it/s,
ETA). Validation and test: on a terminal mmengine's ``ProgressBar`` (redrawn in
place: images done / total, images per second, ETA); when the output is a file
or a pipe, carriage returns would fill it with junk, so a plain line is printed
at every ``log_fraction`` of the images, or after ``interval_s`` seconds without
one. Only the main process prints; it counts every process's images
(``batch size x world size`` per step).
"""
import datetime
import sys
import time

from mmengine.dist import get_world_size, is_main_process
from mmengine.hooks import Hook
from mmengine.utils import ProgressBar

from densevit.engine.training_clock_hook import NO_LIMIT
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
        loops (Sequence[str]): which of 'train', 'val', 'test' to show.
        log_fraction (float): without a terminal, print a val / test line every
            this fraction of the images.
        interval_s (float): longest silence, in seconds, between two lines.
        file: stream to write to (default ``sys.stdout``).
    """

    priority = 'VERY_LOW'

    def __init__(self, loops=('train', 'val', 'test'), log_fraction=0.1, interval_s=5.0,
                 file=None):
        self.loops = tuple(loops)
        self.log_fraction = log_fraction
        self.interval_s = interval_s
        self.file = file
        self._state = None
        self._train = None
        self._val_start = None

    # ---- training
    def before_train(self, runner):
        if 'train' in self.loops and is_main_process():
            now = time.perf_counter()
            # paused: seconds of validation since the last line (not training time)
            self._train = dict(last_time=now, last_iter=runner.iter, printed=False, paused=0.0)

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        state = self._train
        if state is None:
            return
        now = time.perf_counter()
        if state['printed'] and now - state['last_time'] < self.interval_s:
            return
        done = runner.iter + 1
        seconds = now - state['last_time'] - state['paused']
        rate = (done - state['last_iter']) / max(seconds, 1e-9)
        total = runner.max_iters
        parts = [f'iter {done}' + (f'/{total}' if total < NO_LIMIT else '')]
        loss = (outputs or {}).get('loss') if isinstance(outputs, dict) else None
        if loss is not None:
            parts.append(f'loss {float(getattr(loss, "detach", lambda: loss)()):.4f}')
        parts.append(f'{rate:.2f} it/s' if rate >= 1 else f'{1 / max(rate, 1e-9):.2f} s/it')
        eta = runner.message_hub.get_info('eta')
        if eta is not None:
            parts.append(f'eta {datetime.timedelta(seconds=int(eta))}')
        stream = self.file or sys.stdout
        stream.write('train: ' + ', '.join(parts) + '\n')
        stream.flush()
        state.update(last_time=now, last_iter=done, printed=True, paused=0.0)

    def after_train(self, runner):
        self._train = None

    # ---- validation and test

    def _start(self, runner, mode):
        if mode not in self.loops or not is_main_process():
            return
        loader = runner.val_dataloader if mode == 'val' else runner.test_dataloader
        total = len(loader.dataset)
        stream = self.file or sys.stdout
        tty = hasattr(stream, 'isatty') and stream.isatty()
        bar = ProgressBar(total, file=stream) if tty else None
        start = time.perf_counter()
        self._state = dict(mode=mode, total=total, done=0, bar=bar, stream=stream,
                           next_line=self.log_fraction, start=start, last_line=start)

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
        now = time.perf_counter()
        if (fraction >= state['next_line'] or state['done'] == state['total']
                or now - state['last_line'] >= self.interval_s):
            while state['next_line'] <= fraction:
                state['next_line'] += self.log_fraction
            state['last_line'] = now
            elapsed = now - state['start']
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
        self._val_start = time.perf_counter()
        self._start(runner, 'val')

    def before_test_epoch(self, runner):
        self._start(runner, 'test')

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._step(_batch_size(data_batch, outputs))

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._step(_batch_size(data_batch, outputs))

    def after_val_epoch(self, runner, metrics=None):
        if self._train is not None and self._val_start is not None:
            self._train['paused'] += time.perf_counter() - self._val_start
        self._end()

    def after_test_epoch(self, runner, metrics=None):
        self._end()
