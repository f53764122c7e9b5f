"""optimizer_changes: a weight decay moved by a parameter scheduler is not a changed optimizer.

DINO's weight decay follows a cosine from 0.04 to 0.4; a checkpoint saved mid-run holds the
moved value. Hand-made cases: the same start value after 5 scheduler steps resumes; another
start value is named.
"""
import torch
from mmengine.optim.scheduler import CosineAnnealingParamScheduler

from densevit.engine.resume_check import optimizer_changes


def _optimizer(weight_decay, steps):
    params = [torch.nn.Parameter(torch.zeros(3))]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=weight_decay)
    scheduler = CosineAnnealingParamScheduler(optimizer, param_name='weight_decay', eta_min=0.4,
                                              begin=0, end=10, by_epoch=False)
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
    return optimizer, {id(params[0]): 'w'}


def test_a_scheduled_weight_decay_resumes_and_a_changed_start_is_named():
    saved, _ = _optimizer(0.04, steps=5)
    moved = saved.state_dict()['param_groups'][0]['weight_decay']
    assert abs(moved - (0.4 + (0.04 - 0.4) * 0.5)) < 1e-12  # half way along the cosine: 0.22
    fresh, names = _optimizer(0.04, steps=0)
    assert optimizer_changes(fresh, saved.state_dict(), names) == []
    other, names = _optimizer(0.05, steps=0)
    assert optimizer_changes(other, saved.state_dict(), names) == [
        "parameter group 0 (w, ...) has weight decay 0.05, the checkpoint's 0.04"]


def test_an_unscheduled_weight_decay_is_compared_as_it_is():
    params = [torch.nn.Parameter(torch.zeros(3))]
    saved = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05).state_dict()
    now = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    assert optimizer_changes(now, saved, {id(params[0]): 'w'}) == [
        "parameter group 0 (w, ...) has weight decay 0.01, the checkpoint's 0.05"]
