"""HungarianMatcher against brute force over all injective assignments."""
import itertools

import numpy as np
import pytest
import torch

from densevit.models.task_modules.hungarian_matcher import HungarianMatcher
from densevit.structures import box_cxcywh_to_xyxy, generalized_box_iou


def _random_boxes(n, g):
    cxcy = torch.rand(n, 2, generator=g) * 0.6 + 0.2
    wh = torch.rand(n, 2, generator=g) * 0.3 + 0.05
    return torch.cat([cxcy, wh], 1)


def _pair_cost(logits, box, label, tbox):
    """Cost of one prediction/target pair written out directly from the DETR paper."""
    p = logits.softmax(-1)[label]
    l1 = (box - tbox).abs().sum()
    giou = generalized_box_iou(box_cxcywh_to_xyxy(box[None]), box_cxcywh_to_xyxy(tbox[None]))[0, 0]
    return float(-1 * p + 5 * l1 - 2 * giou)


@pytest.mark.parametrize('seed', range(6))
def test_matches_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    B, Q, K = 2, 5, 4
    logits = torch.randn(B, Q, K + 1, generator=g)
    boxes = _random_boxes(B * Q, g).view(B, Q, 4)
    sizes = [int(torch.randint(1, Q + 1, (1,), generator=g)), 3]
    targets = [dict(labels=torch.randint(0, K, (n,), generator=g), boxes=_random_boxes(n, g))
               for n in sizes]
    indices = HungarianMatcher(1, 5, 2)(dict(pred_logits=logits, pred_boxes=boxes), targets)
    for b, (rows, cols) in enumerate(indices):
        n = sizes[b]
        assert rows.dtype == torch.int64 and cols.dtype == torch.int64
        assert len(rows) == len(cols) == n
        assert sorted(cols.tolist()) == list(range(n))
        cost = np.array([[_pair_cost(logits[b, q], boxes[b, q], targets[b]['labels'][t],
                                     targets[b]['boxes'][t]) for t in range(n)] for q in range(Q)])
        got = cost[rows.numpy(), cols.numpy()].sum()
        best = min(sum(cost[q, t] for t, q in enumerate(perm))
                   for perm in itertools.permutations(range(Q), n))
        assert got == pytest.approx(best, abs=1e-5)


def test_empty_targets():
    logits, boxes = torch.randn(3, 4, 3), torch.rand(3, 4, 4)
    empty = dict(labels=torch.zeros(0, dtype=torch.long), boxes=torch.zeros(0, 4))
    one = dict(labels=torch.tensor([1]), boxes=torch.tensor([[0.5, 0.5, 0.2, 0.2]]))
    out = HungarianMatcher()(dict(pred_logits=logits, pred_boxes=boxes), [empty, one, empty])
    assert [len(r) for r, _ in out] == [0, 1, 0]
    out = HungarianMatcher()(dict(pred_logits=logits, pred_boxes=boxes), [empty] * 3)
    assert all(len(r) == 0 and r.dtype == torch.int64 for r, _ in out)


def test_built_from_registry():
    from mmengine.registry import DefaultScope

    from densevit.registry import TASK_UTILS
    with DefaultScope.overwrite_default_scope('densevit'):
        m = TASK_UTILS.build(dict(type='HungarianMatcher', cost_class=2, cost_bbox=5, cost_giou=2))
    assert isinstance(m, HungarianMatcher) and m.cost_class == 2
