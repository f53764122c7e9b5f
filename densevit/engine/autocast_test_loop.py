"""A test loop that predicts under bf16 autocast (``tools/test.py --bf16``).

mmengine's own switch, ``test_cfg=dict(type='TestLoop', fp16=True)``, autocasts to
float16 on a GPU and bfloat16 on a CPU; this loop takes the precision by name and
uses it on either. The predictions reach the metric in float32 (the heads' prediction
layers and post-processing run in float32: ``densevit/utils/precision.py``).
"""
import torch
from mmengine.runner import TestLoop
from mmengine.runner.loops import _update_losses

from densevit.registry import LOOPS
from densevit.utils.precision import autocast_context, check_precision


@LOOPS.register_module()
class AutocastTestLoop(TestLoop):
    """``TestLoop`` whose ``test_step`` runs in ``precision``.

    Args:
        precision (str): 'bf16' (default) or 'fp32'.
        **kwargs: as ``mmengine.runner.TestLoop`` (runner, dataloader, evaluator).
    """

    def __init__(self, runner, dataloader, evaluator, precision='bf16', fp16=False):
        if fp16:
            raise ValueError('AutocastTestLoop: give precision=..., not fp16=True')
        super().__init__(runner, dataloader, evaluator)
        self.precision = check_precision(precision, 'AutocastTestLoop')

    @torch.no_grad()
    def run_iter(self, idx, data_batch):
        """One batch: hooks, ``test_step`` under autocast, metric (as ``TestLoop.run_iter``)."""
        self.runner.call_hook('before_test_iter', batch_idx=idx, data_batch=data_batch)
        device = next(self.runner.model.parameters()).device.type
        with autocast_context(self.precision, device):
            outputs = self.runner.model.test_step(data_batch)
        outputs, self.test_loss = _update_losses(outputs, self.test_loss)
        self.evaluator.process(data_samples=outputs, data_batch=data_batch)
        self.runner.call_hook('after_test_iter', batch_idx=idx, data_batch=data_batch,
                              outputs=outputs)
