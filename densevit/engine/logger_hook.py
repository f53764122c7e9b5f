"""mmengine's LoggerHook with one metrics file per process.

After a test run mmengine's ``LoggerHook`` writes the metrics to
``<log_dir>/<timestamp>.json`` from *every* rank, and all ranks share the log
folder (the timestamp is broadcast). Two processes truncating and writing the same
file at once can leave rank 0's shorter text over the tail of rank 1's longer one —
a file that is not JSON (seen under ``tools/dist_test.sh`` with 2 processes: the
ranks' ``time`` / ``data_time`` differ in length). Here rank r > 0 writes
``<timestamp>.rank<r>.json`` instead, so ``<timestamp>.json`` is rank 0's alone.

Registered in scope ``densevit`` as ``LoggerHook``: every densevit config that names
``type='LoggerHook'`` gets it.
"""
from mmengine.dist import get_rank
from mmengine.hooks import LoggerHook as MMEngineLoggerHook

from densevit.registry import HOOKS


@HOOKS.register_module(name=['LoggerHook', 'RankSafeLoggerHook'])
class RankSafeLoggerHook(MMEngineLoggerHook):
    """``LoggerHook`` whose non-zero ranks dump test metrics to their own file."""

    def before_run(self, runner):
        super().before_run(runner)
        rank = get_rank()
        if rank > 0:
            self.json_log_path = f'{runner.timestamp}.rank{rank}.json'
