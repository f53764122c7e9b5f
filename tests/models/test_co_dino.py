"""Co-DINO's head: a training step with the ATSS auxiliary head and its customized
positive queries, inference equal to DINO's, the positive queries' choice, the quality
focal loss by hand, the ATSS anchors off a padded image, and the levels check. (Equality
with MMDetection's ``CoATSSHead`` and Co-DINO: tests/checkpoint/test_openmmlab_codetr.py,
tests/checkpoint/test_openmmlab_codino.py.)"""
import itertools
import math

import pytest
import torch
from mmengine.registry import DefaultScope
from test_dino import _sample  # a DataSample with ground truth

from densevit.models.heads.positive_queries import positive_queries
from densevit.models.losses.quality_focal_loss import quality_focal_loss
from densevit.models.losses.set_criterion import SetCriterion
from densevit.registry import MODELS

TRANSFORMER = dict(num_heads=2, num_points=2, num_encoder_layers=1, num_decoder_layers=2,
                   feedforward_channels=32)
SCOPES = itertools.count()
ATSS = dict(type='CoATSSHead', feat_channels=16, norm_groups=8, strides=(8, 16, 32, 64, 128))


def _model(head_type='CoDINOHead', **kw):
    """ResNet-18 at width 8, strides 8, 16, 32 + one extra level made by the head: 4 levels."""
    DefaultScope.get_instance(f'test_co_dino_{next(SCOPES)}', scope_name='densevit')
    head = dict(type=head_type, num_classes=3, embed_dims=32, num_queries=6,
                num_feature_levels=4, num_dets=10, norm_groups=8, transformer=TRANSFORMER,
                dn_cfg=dict(num_dn_queries=6))
    if head_type == 'CoDINOHead':
        head.update(aux_heads=[ATSS], max_pos_queries=5, aux_norm_groups=8)
    head.update(kw)
    return MODELS.build(dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3)),
        bbox_head=head))


def _batch():
    x = torch.randn(2, 3, 96, 128)
    samples = [_sample((96, 128), [[4, 6, 60, 70], [50, 20, 120, 90], [70, 50, 78, 61]],
                       [0, 2, 1]),
               _sample((80, 112), [[10, 8, 50, 36]], [1])]
    for s in samples:
        s.set_metainfo(dict(batch_input_shape=(96, 128)))
    return x, samples


AUX_KEYS = {'loss_cls0', 'loss_bbox0', 'loss_centerness0', 'loss_cls_aux0', 'loss_bbox_aux0',
            'loss_iou_aux0', 'd0.loss_cls_aux0', 'd0.loss_bbox_aux0', 'd0.loss_iou_aux0'}


def _training_step(model):
    """One training step's losses on :func:`_batch`: the auxiliary keys there, every loss
    finite, positives for the ATSS head and the positive queries."""
    losses = model.train()(*_batch(), mode='loss')
    assert AUX_KEYS <= set(losses)
    assert all(torch.isfinite(v) for v in losses.values())
    assert losses['loss_bbox_aux0'] > 0 and losses['loss_bbox0'] > 0  # positives exist
    return losses


def _backward_positive_queries(model, losses):
    """Backward of the positive queries' losses: none reaches the ATSS head."""
    sum(v for k, v in losses.items() if '_aux0' in k).backward(retain_graph=True)
    assert all(p.grad is None for p in model.bbox_head.aux_heads.parameters())


def _backward_atss(model, losses):
    """Backward of the ATSS losses alone (after zeroing): they reach the ATSS head, the extra
    level's convolution and the encoder's input projection."""
    model.zero_grad()
    (losses['loss_cls0'] + losses['loss_bbox0'] + losses['loss_centerness0']).backward()
    head = model.bbox_head
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for n, p in head.aux_heads.named_parameters() if 'scales' not in n)
    assert head.aux_downsample[0].weight.grad.abs().sum() > 0
    assert head.input_proj[0][0].weight.grad.abs().sum() > 0


def _assert_predicts_alike(co, plain, aux_parts):
    """``co``'s weights loaded into ``plain`` (all its keys; ``co``'s extra ones are the
    modules ``aux_parts``) give identical predictions and raw outputs."""
    co.eval(), plain.eval()
    missing = plain.load_state_dict(co.state_dict(), strict=False)
    assert not missing.missing_keys
    assert {k.split('.')[1] for k in missing.unexpected_keys} == set(aux_parts)
    x, samples = _batch()
    with torch.no_grad():
        a = co(x, [s.clone() for s in samples], mode='predict')
        b = plain(x, [s.clone() for s in samples], mode='predict')
        ta, tb = co(x, samples, mode='tensor'), plain(x, samples, mode='tensor')
    for p, q in zip(a, b, strict=True):
        for k in ('bboxes', 'scores', 'labels'):
            assert torch.equal(p.pred_instances[k], q.pred_instances[k])
    assert torch.equal(ta['pred_logits'], tb['pred_logits'])
    assert torch.equal(ta['pred_boxes'], tb['pred_boxes'])


def test_co_dino_trains_a_step():
    """Finite DINO, ATSS and positive-query losses under their keys. The positive queries'
    losses reach their projection and, through the memory, the encoder, not the ATSS head;
    the ATSS losses reach the ATSS head, the extra level's convolution and the encoder, not
    the projection."""
    torch.manual_seed(0)
    model = _model()
    losses = _training_step(model)
    assert {'loss_cls', 'd0.loss_cls', 'dn_loss_cls', 'enc_loss_cls'} <= set(losses)
    head = model.bbox_head
    _backward_positive_queries(model, losses)
    assert head.aux_pos_trans[0].weight.grad.abs().sum() > 0
    assert head.aux_pos_trans_norm[0].weight.grad.abs().sum() > 0
    assert head.input_proj[0][0].weight.grad.abs().sum() > 0
    _backward_atss(model, losses)
    assert head.aux_pos_trans[0].weight.grad is None


def test_co_dino_predicts_as_dino():
    """The same weights in a DINO head give identical predictions and raw outputs: the
    auxiliary parts take no part in inference."""
    torch.manual_seed(0)
    _assert_predicts_alike(_model(), _model('DINOHead'), {
        'aux_heads', 'aux_downsample', 'aux_pos_trans', 'aux_pos_trans_norm'})


def test_training_without_objects():
    """No ground truth anywhere: every positive query is a padding anchor, the box losses
    are zero and everything is finite."""
    torch.manual_seed(0)
    model = _model().train()
    x = torch.randn(1, 3, 64, 64)
    losses = model(x, [_sample((64, 64))], mode='loss')
    assert losses['loss_bbox_aux0'] == 0 and losses['loss_iou_aux0'] == 0
    assert all(torch.isfinite(v) for v in losses.values())


class _Ranked:
    """Draws that put the candidates in a given order (the first listed ranks first)."""

    def __init__(self, orders):
        self.orders, self.calls = orders, []

    def __call__(self, name, shape, device=None, dtype=torch.float32):
        order = self.orders[name].pop(0)
        self.calls.append((name, shape))
        u = torch.empty(shape)
        u[torch.as_tensor(order)] = torch.arange(shape[0], dtype=torch.float32) / shape[0]
        return u


def test_positive_queries_choice():
    """Image 0 has 4 positives (over max_pos = 3: a random 3 of them, in the drawn order),
    image 1 one (padded with drawn background anchors to 3 queries); the references are the
    anchors normalised by each image's size, the targets the positives' boxes."""
    K, A = 2, 8
    anchors = torch.arange(2 * A * 4, dtype=torch.float32).view(2, A, 4)
    labels = torch.full((2, A), K)
    labels[0, [1, 3, 4, 6]] = torch.tensor([0, 1, 1, 0])
    labels[1, 5] = 1
    boxes = torch.rand(2, A, 4) * 50
    draws = _Ranked({'aux_positives': [[2, 0, 3, 1]],
                     'aux_negatives': [[6, 0, 5, 1, 4, 2, 3]]})
    ref, targets, indices, picked = positive_queries(
        anchors, labels, boxes, [(10, 20), (40, 80)], K, draws, max_pos=3, min_queries=2)
    assert draws.calls == [('aux_positives', (4,)), ('aux_negatives', (7,))]
    chosen = [[4, 1, 6], [5, 7, 0]]  # image 1: the positive, then negatives 6 and 0 of 0..7\5

    def cxcywh(b, w, h):
        b = b / torch.tensor([w, h, w, h])
        return torch.cat([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], -1)
    assert torch.allclose(ref[0], cxcywh(anchors[0, chosen[0]], 20, 10))
    assert torch.allclose(ref[1], cxcywh(anchors[1, chosen[1]], 80, 40))
    assert targets[0]['labels'].tolist() == [1, 0, 0] and targets[1]['labels'].tolist() == [1]
    assert torch.allclose(targets[0]['boxes'], cxcywh(boxes[0, chosen[0]], 20, 10))
    assert [i[0].tolist() for i in indices] == [[0, 1, 2], [0]]
    assert picked.tolist() == chosen


def test_positive_queries_at_least_min():
    labels = torch.full((1, 20), 3)
    ref, targets, _, _ = positive_queries(
        torch.rand(1, 20, 4), labels, torch.zeros(1, 20, 4), [(8, 8)], 3,
        lambda n, s, d=None, t=None: torch.rand(s))
    assert ref.shape == (1, 9, 4) and len(targets[0]['labels']) == 0


def test_quality_focal_loss_by_hand():
    """Two logits: a positive at IoU 0.6 and a negative, β = 2, from the formula
    BCE(x, t) · |t − σ(x)|^β written out."""
    x = torch.tensor([[0.5, -1.0]])
    t = torch.tensor([[0.6, 0.0]])
    s0, s1 = 1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(1.0))
    pos = -(0.6 * math.log(s0) + 0.4 * math.log(1 - s0)) * (0.6 - s0) ** 2
    neg = -math.log(1 - s1) * s1 ** 2
    out = quality_focal_loss(x, t, beta=2.0)
    assert out[0].tolist() == pytest.approx([pos, neg], rel=1e-6)


def test_criterion_quality_focal_by_hand():
    """SetCriterion with ``quality_focal``: one image, two queries, one target matched to
    query 0 (given assignment): the class loss is the quality focal loss with the IoU of
    query 0's box at its class, the rest zero targets, over num_boxes."""
    crit = SetCriterion(2, use_focal=True, quality_focal=True,
                        loss_weights=dict(loss_cls=1.0, loss_bbox=1.0, loss_iou=1.0))
    logits = torch.tensor([[[0.2, -0.3], [1.0, -2.0]]])
    boxes = torch.tensor([[[0.5, 0.5, 0.4, 0.4], [0.2, 0.2, 0.1, 0.1]]])  # cxcywh
    target = dict(labels=torch.tensor([1]), boxes=torch.tensor([[0.6, 0.5, 0.4, 0.4]]))
    out = crit(dict(pred_logits=logits, pred_boxes=boxes), [target], 2.0,
               indices=[(torch.tensor([0]), torch.tensor([0]))])
    iou = (0.3 * 0.4) / (2 * 0.16 - 0.3 * 0.4)  # x-overlap 0.3 of side 0.4, same y

    def bce(x, t):
        s = 1 / (1 + math.exp(-x))
        return -(t * math.log(s) + (1 - t) * math.log(1 - s)), s
    total = 0.0
    for x, t in [(0.2, 0.0), (-0.3, iou), (1.0, 0.0), (-2.0, 0.0)]:
        b, s = bce(x, t)
        total += b * abs(t - s) ** 2
    assert out['loss_cls'].item() == pytest.approx(total / 2.0, rel=1e-5)


def test_quality_focal_needs_focal():
    with pytest.raises(ValueError, match='quality_focal=True needs use_focal=True'):
        SetCriterion(2, quality_focal=True)


def test_aux_head_levels_must_match():
    """4 encoder levels + the extra one = 5 maps; an ATSS head with 6 strides is refused
    at build time, naming both."""
    with pytest.raises(ValueError, match=r'has 6 strides \(4, 8, 16, 32, 64, 128\), but reads '
                                         r"the encoder's 4 levels .* 5 maps"):
        _model(aux_heads=[dict(ATSS, strides=(4, 8, 16, 32, 64, 128))])


def test_atss_anchors_off_the_image_take_no_part():
    """A 40 x 56 image in a 48 x 64 batch: at stride 8 the anchors of the 6th row and 8th
    column are off the image (ceil(40 / 8) = 5 rows, ceil(56 / 8) = 7 columns), never
    assigned and without a classification loss: changing their logits changes nothing."""
    DefaultScope.get_instance(f'test_co_dino_{next(SCOPES)}', scope_name='densevit')
    head = MODELS.build(dict(ATSS, num_classes=3, in_channels=16, strides=(8, 16)))
    sizes = [(6, 8), (3, 4)]
    valid = head.valid_anchors(sizes, (40, 56), 'cpu')
    assert valid[:48].view(6, 8).sum().item() == 35 and not valid[40:48].any()
    assert valid[48:].all()  # stride 16: ceil(40 / 16) = 3 rows, ceil(56 / 16) = 4 columns
    torch.manual_seed(0)
    outs = head([torch.randn(1, 16, h, w) for h, w in sizes])
    gt = [torch.tensor([[4.0, 2.0, 56.0, 40.0]])], [torch.tensor([1])]
    losses, tg = head.loss(outs, *gt, img_sizes=[(40, 56)])
    assert (tg['labels'][0, ~valid] == 3).all() and (tg['labels'][0, valid] < 3).any()
    logits = outs[0][0].clone()
    logits[:, :, 5, :] += 5.0
    logits[:, :, :, 7] -= 5.0
    moved = ([logits, outs[0][1]], *outs[1:])
    changed, _ = head.loss(moved, *gt, img_sizes=[(40, 56)])
    assert torch.equal(changed['loss_cls'], losses['loss_cls'])
    everywhere, _ = head.loss(moved, *gt)  # without the image sizes every anchor counts
    assert not torch.equal(everywhere['loss_cls'], losses['loss_cls'])
