"""Test hooks that record what a run did, for assertions afterwards.

Imported by test configs through ``custom_imports = dict(imports=['probe_hooks'])``
(tests/tools is on the import path through pytest.ini in-process, and on PYTHONPATH
for torchrun workers).
"""
import os.path as osp

import torch
from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from densevit.registry import HOOKS


def _model(runner):
    return runner.model.module if is_model_wrapper(runner.model) else runner.model


@HOOKS.register_module()
class DumpRankStateHook(Hook):
    """After training, every rank writes ``<work_dir>/rank{r}_state.pth``: its state dict,
    the world size, its model wrapper and the normalisation layer types it trained with."""

    priority = 'VERY_LOW'

    def after_train(self, runner):
        model = _model(runner)
        norm_types = sorted({type(m).__name__ for m in model.modules()
                             if 'Norm' in type(m).__name__})
        torch.save(dict(state_dict={k: v.detach().clone() for k, v in model.state_dict().items()},
                        world_size=get_world_size(), norm_types=norm_types,
                        wrapper=type(runner.model).__name__),
                   osp.join(runner.work_dir, f'rank{get_rank()}_state.pth'))


@HOOKS.register_module()
class ValParamsProbeHook(Hook):
    """Writes ``<work_dir>/val_params.pth``: the weights the model holds while validating
    (runs after EMAHook's swap, priority LOW < NORMAL) and right after training."""

    priority = 'LOW'

    def before_val_epoch(self, runner):
        self._save(runner, 'val_params.pth')

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 == runner.max_iters:
            self._save(runner, 'train_params.pth')

    @staticmethod
    def _save(runner, name):
        state = {k: v.detach().clone() for k, v in _model(runner).state_dict().items()}
        torch.save(state, osp.join(runner.work_dir, name))
