"""Ctrl-C and SIGTERM stop training with a checkpoint, not a traceback.

A person presses Ctrl-C (SIGINT); Slurm, Kubernetes and ``kill`` send SIGTERM, often
shortly before a harder kill. Either way the run should end at a known iteration with
its weights saved and one line saying how to continue. :class:`InterruptHook` (added by
``tools/train.py`` to single-process training) installs handlers that only note the
signal; after the iteration in progress (or the validation in progress) finishes, the
hook saves that iteration atomically through the checkpoint hook and raises
:class:`TrainingInterrupted`, which ``tools/train.py`` prints as one line before
exiting with 130 (SIGINT) or 143 (SIGTERM), the shell's codes for those signals. A
second Ctrl-C while the first is pending stops at once (``KeyboardInterrupt``); the last
complete checkpoint is then the one before.

Distributed runs keep their own SIGTERM handling (``dist_faults.note_sigterm``): each
rank would stop at a different iteration.
"""
import os
import signal

from mmengine.hooks import Hook

from densevit.registry import HOOKS

_NAMES = {signal.SIGINT: 'SIGINT (Ctrl-C)', signal.SIGTERM: 'SIGTERM'}


class TrainingInterrupted(Exception):
    """Training stopped by a signal after saving; ``exit_code`` is 128 + the signal."""

    def __init__(self, message, signum):
        super().__init__(message)
        self.exit_code = 128 + signum


@HOOKS.register_module()
class InterruptHook(Hook):
    """Turn SIGINT / SIGTERM into a checkpoint at the iteration reached (module doc)."""

    priority = 'LOWEST'  # after the checkpoint hook's own save of the same iteration

    def __init__(self):
        self.received = None
        self._previous = {}

    def _note(self, signum, frame):
        if os.getpid() != self._pid:  # a forked DataLoader worker: its parent decides
            return
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.received = signum

    def before_train(self, runner):
        self._pid = os.getpid()
        for signum in _NAMES:
            self._previous[signum] = signal.signal(signum, self._note)

    def after_train(self, runner):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._stop_if_received(runner, runner.iter + 1)  # the loop counts it after the hooks

    def after_val_epoch(self, runner, metrics=None):
        self._stop_if_received(runner, runner.iter)

    def _stop_if_received(self, runner, step):
        if self.received is None:
            return
        from densevit.engine.checkpoint_hook import AtomicCheckpointHook
        saver = next((h for h in runner.hooks if isinstance(h, AtomicCheckpointHook)), None)
        if saver is None:
            path = os.path.join(runner.work_dir, f'iter_{step}.pth')
            runner.save_checkpoint(runner.work_dir, os.path.basename(path))
        else:
            path = saver.save_now(runner, step)
        signum, self.received = self.received, None
        self.after_train(runner)
        raise TrainingInterrupted(
            f'{_NAMES[signum]} received: training stopped at iteration {step}, saved as {path}; '
            f'continue with the same command and --resume', signum)
