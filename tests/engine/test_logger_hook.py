"""Each rank dumps its test metrics to its own file (no two writers on one JSON)."""
from types import SimpleNamespace

from mmengine.registry import DefaultScope

import densevit.engine.logger_hook as logger_hook
from densevit.registry import HOOKS


def json_path_for_rank(monkeypatch, rank):
    monkeypatch.setattr(logger_hook, 'get_rank', lambda: rank)
    hook = logger_hook.RankSafeLoggerHook()
    hook.before_run(SimpleNamespace(timestamp='20261122_070000', work_dir='w'))
    return hook.json_log_path


def test_rank_zero_keeps_mmengine_name_others_get_their_own(monkeypatch):
    names = [json_path_for_rank(monkeypatch, r) for r in (0, 1, 2)]
    assert names == ['20261122_070000.json', '20261122_070000.rank1.json',
                     '20261122_070000.rank2.json']


def test_densevit_configs_get_it_by_mmengine_name():
    with DefaultScope.overwrite_default_scope('densevit'):
        hook = HOOKS.build(dict(type='LoggerHook', interval=5))
    assert isinstance(hook, logger_hook.RankSafeLoggerHook) and hook.interval == 5
