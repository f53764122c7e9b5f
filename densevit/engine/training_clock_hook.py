"""Train on a wall-clock budget: validate every N minutes, stop after M, record the curve.

``tools/train.py CONFIG --minutes M --eval-every N`` adds this hook and lifts the
loop's iteration limit, so the clock alone decides when to validate and stop.
"""
import csv
import math
import os.path as osp
import time

from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.logging import print_log

from densevit.engine.checkpoint_hook import AtomicCheckpointHook
from densevit.registry import HOOKS
from densevit.visualization.training_curve import plot_curves

# the iteration limit a clocked run's loop is given: never reached
NO_LIMIT = 10 ** 8


@HOOKS.register_module()
class TrainingClockHook(Hook):
    """Measure training time (wall clock minus validation), validate every
    ``eval_every_minutes`` of it, stop after ``budget_minutes``.

    Each validation appends a row ``minutes, iter, <metrics...>`` to
    ``<work_dir>/<out_file>``: the data behind "metric versus minutes" curves.
    ``stop_at=dict(key=..., value=...)`` also stops once a metric reaches a value.
    When training stops, a checkpoint is saved where it stopped (the loop's own
    last-iteration save never comes) and the table is drawn into
    ``<work_dir>/curve.png``.

    The ETA that the log shows (mmengine's ``IterTimerHook`` extrapolates it from
    the iteration limit, which a clocked run does not have) is replaced by the
    training time left plus the validations still due, each as long as the last.
    For that the hook runs right after ``IterTimerHook`` (priority NORMAL) and
    before the logger writes the line.
    """

    priority = 'NORMAL'

    def __init__(self, budget_minutes=None, eval_every_minutes=None, out_file='training_clock.csv',
                 stop_at=None):
        self.stop_at = stop_at
        self.budget = None if budget_minutes is None else budget_minutes * 60.0
        self.every = None if eval_every_minutes is None else eval_every_minutes * 60.0
        self.out_file = out_file
        self.rows = []
        self._iters_done = None

    def before_train(self, runner):
        self.train_seconds = 0.0
        self.val_seconds = 0.0  # duration of the last validation
        self._mark = time.perf_counter()
        self._next_eval = self.every

    def _tick(self):
        now = time.perf_counter()
        self.train_seconds += now - self._mark
        self._mark = now

    def before_val(self, runner):
        if hasattr(self, '_mark'):
            self._tick()
        self._val_start = time.perf_counter()

    def after_val(self, runner):
        self._mark = time.perf_counter()  # validation time is not training time
        self.val_seconds = self._mark - getattr(self, '_val_start', self._mark)

    def eta_seconds(self):
        """Training seconds left in the budget plus the validations still due."""
        if self.budget is None:
            return None
        left = max(self.budget - self.train_seconds, 0.0)
        vals = 1  # the one at the budget
        if self._next_eval is not None and self._next_eval < self.budget:
            vals += math.ceil((self.budget - self._next_eval) / self.every)
        return left + vals * self.val_seconds

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._tick()
        over_budget = self.budget is not None and self.train_seconds >= self.budget
        due = self._next_eval is not None and self.train_seconds >= self._next_eval
        if (due or over_budget) and runner.val_loop is not None:
            while self._next_eval is not None and self._next_eval <= self.train_seconds:
                self._next_eval += self.every
            # inside after_train_iter the loop has not counted this iteration yet
            self._iters_done = runner.iter + 1
            metrics = runner.val_loop.run()
            self._iters_done = None
            runner.model.train()
            if self.stop_at and metrics.get(self.stop_at['key'], -1) >= self.stop_at['value']:
                print_log(f"TrainingClockHook: {self.stop_at['key']} reached "
                          f"{metrics[self.stop_at['key']]:.3f} after {self.train_seconds / 60:.1f} "
                          f'training minutes, iteration {runner.iter + 1}; stopping.',
                          logger='current')
                runner.train_loop.stop_training = True
        if over_budget:
            print_log(f'TrainingClockHook: {self.train_seconds / 60:.1f} training minutes reached '
                      f'at iteration {runner.iter + 1}; stopping.', logger='current')
            runner.train_loop.stop_training = True
        eta = self.eta_seconds()  # after any validation: ValLoop overwrites 'eta' with its own
        if eta is not None:
            runner.message_hub.update_info('eta', eta)

    def after_train(self, runner):
        step = runner.iter
        saver = next((h for h in runner.hooks if isinstance(h, AtomicCheckpointHook)), None)
        path = osp.join(runner.work_dir, f'iter_{step}.pth')
        if saver is None:
            runner.save_checkpoint(runner.work_dir, osp.basename(path))
        else:  # atomic, updates last_checkpoint (for --resume) and keeps max_keep_ckpts
            path = saver.save_now(runner, step)
        table = osp.join(runner.work_dir, self.out_file)
        if is_main_process() and self.rows:
            png = plot_curves([runner.work_dir], osp.join(runner.work_dir, 'curve.png'),
                              file_name=self.out_file)
            print_log(f'stopped at iteration {step}: checkpoint {path}, curve {png}, '
                      f'table {table}', logger='current')

    def after_val_epoch(self, runner, metrics=None):
        if not hasattr(self, 'train_seconds'):
            return  # a test or standalone validation
        iters = self._iters_done or runner.iter
        row = dict(minutes=round(self.train_seconds / 60, 3), iter=iters)
        row.update({k: float(v) for k, v in (metrics or {}).items()
                    if isinstance(v, (int, float))})
        self.rows.append(row)
        keys = list(dict.fromkeys(k for r in self.rows for k in r))
        with open(osp.join(runner.work_dir, self.out_file), 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.rows)
