"""Co-DETR's collaborative ATSS head equals MMDetection 3.3's ``CoATSSHead`` (projects/CO-DETR).

Fixture (tools/dev/openmmlab_fixtures/make_codetr.py): mmdet's ``CoATSSHead`` as Co-DINO
builds it, made tiny (16 channels, 3 classes, strides 8..128), every tensor random, saved
under ``bbox_head.0.``; random input maps of three 192 x 256 images (4, 2 and no
ground-truth boxes); its eval outputs, and one training step: per-level losses, the ATSS
assignment, the positive targets and the gradients.
"""
from pathlib import Path

import pytest
import torch

from densevit.models.heads.co_atss_head import CoATSSHead, memory_to_maps
from densevit.models.task_modules.atss_assigner import ATSSAssigner
from densevit.structures import aligned_generalized_box_iou, generalized_box_iou

FIXTURES = Path(__file__).resolve().parent / 'fixtures'
PREFIX = 'bbox_head.0.'


def max_diff(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmdet_codetr_atss_io.pth', weights_only=True)


@pytest.fixture(scope='module')
def head():
    sd = torch.load(FIXTURES / 'mmdet_codetr_atss.pth', weights_only=True)['state_dict']
    head = CoATSSHead(num_classes=3, in_channels=16, feat_channels=16, stacked_convs=1,
                      strides=(8, 16, 32, 64, 128), norm_groups=8)
    head.load_state_dict({k[len(PREFIX):]: v for k, v in sd.items()}, strict=True)
    return head.eval()


def test_co_atss_outputs_match_mmdet(head, io):
    with torch.no_grad():
        outs = head(io['inputs']['feats'])
    ref = io['outputs']['eval']
    for ours, theirs, key in zip(outs, (ref['cls'], ref['box'], ref['ctr']), 'cls box ctr'.split(),
                                 strict=True):
        for lvl, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert a.shape == b.shape
            assert max_diff(a, b) <= 1e-4, (key, lvl, max_diff(a, b))


def train(head, inputs, dtype=torch.float32):
    head = head.to(dtype).train()
    try:
        feats = [f.to(dtype) for f in inputs['feats']]
        outs = head(feats)
        losses, tg = head.level_losses(outs, inputs['gt_bboxes'], inputs['gt_labels'])
        head.zero_grad()
        sum(sum(v) for v in losses.values()).backward()
        grads = {PREFIX + k: p.grad.clone() for k, p in head.named_parameters()}
        head.zero_grad()
    finally:
        head.float().eval()
    return {k: torch.stack([x.detach() for x in v]) for k, v in losses.items()}, tg, grads


def test_co_atss_training_step_matches_mmdet(head, io):
    """The same anchors, positives (to the same boxes), targets, per-level losses and
    gradients."""
    ref = io['outputs']['train']
    losses, tg, grads = train(head, io['inputs'])
    assert torch.equal(tg['anchors'], ref['pos_anchors'])
    for i, theirs in enumerate(ref['assigned']):  # mmdet: 1-based gt index, 0 = negative
        assert torch.equal(tg['assigned'][i] + 1, theirs), i
        assert torch.equal(tg['labels'][i], ref['pos_labels'][i]), i
        assert torch.equal(tg['boxes'][i], ref['pos_targets'][i]), i
    assert [int((a > 0).sum()) for a in ref['assigned']] == [25, 18, 0]
    assert set(losses) == set(ref['losses'])
    for k, v in ref['losses'].items():
        assert max_diff(losses[k], v) <= 1e-5 * max(1.0, v.abs().max().item()), \
            (k, losses[k], v)
    assert set(grads) == set(ref['grads'])
    for k, g in grads.items():
        assert max_diff(g, ref['grads'][k]) <= 1e-4 * ref['grads'][k].abs().max().item() + 1e-6, k


def test_co_atss_float64_training_step(head, io):
    """In float64 the assignment stays mmdet's and the losses stay within float32's
    rounding of mmdet's (which runs the box deltas in float32)."""
    ref = io['outputs']['train']
    losses, tg, _ = train(head, io['inputs'], torch.float64)
    assert tg['anchors'].dtype == torch.float64
    for i, theirs in enumerate(ref['assigned']):
        assert torch.equal(tg['assigned'][i] + 1, theirs), i
    for k, v in ref['losses'].items():
        assert max_diff(losses[k], v) <= 1e-5 * max(1.0, v.abs().max().item()), k


def test_atss_assigner_rules():
    """Top-k nearest per level, mean + std threshold, centre inside the box, ties of two boxes
    to the higher IoU; no boxes: all negative."""
    assigner = ATSSAssigner(topk=2)
    anchors = torch.tensor([[0.0, 0, 10, 10], [5, 5, 15, 15], [20, 20, 30, 30],
                            [0, 0, 20, 20], [10, 10, 30, 30]])
    gt = torch.tensor([[1.0, 1, 11, 11], [19, 19, 31, 31]])
    assigned, iou = assigner(anchors, [3, 2], gt)
    assert iou.shape == (5, 2)
    # box 0: candidates 0, 1 (level 0) and 3, 4 (level 1), IoUs .68, .22, .25, .002:
    # threshold (mean + std) .57, only anchor 0; box 1: candidates 2, 1 and 4, 3, only
    # anchor 2 (.69) passes; anchor 4's centre (20, 20) lies inside box 1 but under the
    # threshold
    assert assigned.tolist() == [0, -1, 1, -1, -1]
    none, _ = assigner(anchors, [3, 2], torch.zeros(0, 4))
    assert (none == -1).all()


def test_box_helpers_agree():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(6, 2, generator=g)
    a = torch.cat([xy, xy + torch.rand(6, 2, generator=g)], 1)
    xy = torch.rand(6, 2, generator=g)
    b = torch.cat([xy, xy + torch.rand(6, 2, generator=g)], 1)
    assert torch.allclose(aligned_generalized_box_iou(a, b), generalized_box_iou(a, b).diag())


def test_memory_to_maps_round_trip():
    maps = [torch.randn(2, 4, 3, 5), torch.randn(2, 4, 2, 2)]
    memory = torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1)
    back = memory_to_maps(memory, torch.tensor([[3, 5], [2, 2]]))
    assert all(torch.equal(x, y) for x, y in zip(back, maps, strict=True))


def test_co_atss_init_and_empty_batch():
    """The documented init survives ``init_weights`` (the class bias at prior 0.01); a batch
    without boxes trains (zero box losses joined to the graph)."""
    head = CoATSSHead(num_classes=2, in_channels=8, feat_channels=8, strides=(8, 16),
                      norm_groups=4)
    head.init_weights()
    assert torch.allclose(head.atss_cls.bias.sigmoid(), torch.full((2,), 0.01))
    assert head.cls_convs[0].conv.weight.std() < 0.02
    feats = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 2, 2)]
    losses, tg = head.loss(head(feats), [torch.zeros(0, 4)] * 2,
                           [torch.zeros(0, dtype=torch.long)] * 2)
    assert (tg['assigned'] == -1).all() and tg['boxes'].shape == (2, 20, 4)
    assert losses['loss_bbox'] == 0 and losses['loss_centerness'] == 0
    sum(losses.values()).backward()
    assert head.atss_reg.weight.grad is not None
