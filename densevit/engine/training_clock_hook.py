"""Validate on a wall-clock schedule and record quality against training minutes."""
import csv
import os.path as osp
import time

from mmengine.hooks import Hook
from mmengine.logging import print_log

from densevit.registry import HOOKS


@HOOKS.register_module()
class TrainingClockHook(Hook):
    """Measure training time (wall clock minus validation), validate every
    ``eval_every_minutes`` of it, stop after ``budget_minutes``.

    Each validation appends a row ``minutes, iter, <metrics...>`` to
    ``<work_dir>/<out_file>``: the data behind "AP versus minutes" curves.
    ``stop_at=dict(key=..., value=...)`` also stops once a metric reaches a value.
    """

    priority = 'LOW'

    def __init__(self, budget_minutes=None, eval_every_minutes=None, out_file='training_clock.csv',
                 stop_at=None):
        self.stop_at = stop_at
        self.budget = None if budget_minutes is None else budget_minutes * 60.0
        self.every = None if eval_every_minutes is None else eval_every_minutes * 60.0
        self.out_file = out_file
        self.rows = []

    def before_train(self, runner):
        self.train_seconds = 0.0
        self._mark = time.perf_counter()
        self._next_eval = self.every
        self._in_val = False

    def _tick(self):
        now = time.perf_counter()
        self.train_seconds += now - self._mark
        self._mark = now

    def before_val(self, runner):
        if hasattr(self, '_mark'):
            self._tick()
        self._in_val = True

    def after_val(self, runner):
        self._in_val = False
        self._mark = time.perf_counter()  # validation time is not training time

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
                          f'training minutes, iteration {runner.iter + 1}; stopping.', logger='current')
                runner.train_loop.stop_training = True
        if over_budget:
            print_log(f'TrainingClockHook: {self.train_seconds / 60:.1f} training minutes reached '
                      f'at iteration {runner.iter + 1}; stopping.', logger='current')
            runner.train_loop.stop_training = True

    def after_val_epoch(self, runner, metrics=None):
        if not hasattr(self, 'train_seconds'):
            return  # a test or standalone validation
        iters = getattr(self, '_iters_done', None) or runner.iter
        row = dict(minutes=round(self.train_seconds / 60, 3), iter=iters)
        row.update({k: float(v) for k, v in (metrics or {}).items()
                    if isinstance(v, (int, float))})
        self.rows.append(row)
        keys = list(dict.fromkeys(k for r in self.rows for k in r))
        with open(osp.join(runner.work_dir, self.out_file), 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.rows)
