"""DETR pieces: sine encoding, padding mask, criterion, post-processing, end-to-end modes."""
import math

import pytest
import torch
import torch.nn.functional as F
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

from densevit.models.heads.detr_head import DETRHead
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.models.losses.set_criterion import SetCriterion
from densevit.registry import MODELS
from densevit.structures import DataSample

TINY_HEAD = dict(num_classes=3, in_channels=8, embed_dims=16, num_queries=5,
                 transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                                  feedforward_channels=32, dropout=0.0))


def _sample(img_shape, boxes=(), labels=(), scale_factor=(1.0, 1.0), ori_shape=None):
    ds = DataSample(metainfo=dict(img_shape=img_shape, scale_factor=scale_factor,
                                  ori_shape=ori_shape or img_shape))
    gt = InstanceData()
    gt.bboxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    gt.labels = torch.tensor(labels, dtype=torch.int64)
    ds.gt_instances = gt
    return ds


def test_sine_encoding_matches_formula():
    mask = torch.zeros(1, 3, 4, dtype=torch.bool)
    mask[0, :, 3] = True  # last column is padding
    pe = SinePositionalEncoding2D(num_feats=4, temperature=100, normalize=True)(mask)
    assert pe.shape == (1, 8, 3, 4)
    y, x, eps = 2, 1, 1e-6  # pixel (row 2, col 1): counts are 3 of 3 rows and 2 of 3 columns
    ypos = 3 / (3 + eps) * 2 * math.pi
    xpos = 2 / (3 + eps) * 2 * math.pi
    expect = []
    for pos in (ypos, xpos):
        for i in range(4):
            v = pos / 100 ** (2 * (i // 2) / 4)
            expect.append(math.sin(v) if i % 2 == 0 else math.cos(v))
    assert torch.allclose(pe[0, :, y, x], torch.tensor(expect), atol=1e-6)


def test_criterion_hand_computed():
    crit = SetCriterion(num_classes=2, loss_weights=dict(loss_cls=1, loss_bbox=5, loss_iou=2))
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]]])  # query 0 says class 0
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]]])
    target = [dict(labels=torch.tensor([0]), boxes=torch.tensor([[0.5, 0.5, 0.4, 0.2]]))]
    out = crit(dict(pred_logits=logits, pred_boxes=boxes), target, num_boxes=1.0)
    ce0 = -F.log_softmax(logits[0, 0], -1)[0]
    ce1 = -F.log_softmax(logits[0, 1], -1)[2]
    assert out['loss_cls'].item() == pytest.approx(((ce0 * 1 + ce1 * 0.1) / 1.1).item(), rel=1e-6)
    assert out['loss_bbox'].item() == pytest.approx(5 * 0.2, rel=1e-6)
    # pred box 0.4..0.6 x 0.4..0.6 inside target 0.3..0.7 x 0.4..0.6: IoU 0.5, enclosing = union
    assert out['loss_iou'].item() == pytest.approx(2 * 0.5, rel=1e-6)


def test_no_object_image_has_finite_loss():
    crit = SetCriterion(num_classes=2)
    logits, boxes = torch.randn(2, 4, 3, requires_grad=True), torch.rand(2, 4, 4)
    empty = dict(labels=torch.zeros(0, dtype=torch.long), boxes=torch.zeros(0, 4))
    out = crit(dict(pred_logits=logits, pred_boxes=boxes), [empty, empty], num_boxes=1.0)
    assert out['loss_bbox'].item() == 0 and out['loss_iou'].item() == 0
    assert torch.isfinite(out['loss_cls'])
    sum(out.values()).backward()
    assert torch.isfinite(logits.grad).all()


def test_padding_is_never_attended():
    torch.manual_seed(0)
    head = DETRHead(**TINY_HEAD).eval()
    feat = torch.randn(1, 8, 4, 5)
    alone = head(feat, torch.zeros(1, 4, 5, dtype=torch.bool))
    padded = torch.randn(1, 8, 6, 7) * 100  # garbage in the padding
    padded[:, :, :4, :5] = feat
    mask = torch.ones(1, 6, 7, dtype=torch.bool)
    mask[:, :4, :5] = False
    inside = head(padded, mask)
    for k in alone:
        assert torch.allclose(alone[k], inside[k], atol=1e-5), k


def test_postprocess_rescales_to_original_image():
    head = DETRHead(**TINY_HEAD)
    logits = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    boxes = torch.tensor([[0.5, 0.5, 0.5, 0.25]])  # image 100x200 (h, w) -> xyxy 50, 37.5, 150, 62.5
    res = head.postprocess(logits, boxes, dict(img_shape=(100, 200), scale_factor=(2.0, 0.5),
                                               ori_shape=(200, 100)))
    assert res.labels.tolist() == [1]
    assert res.scores.item() == pytest.approx(torch.softmax(logits[0], -1)[1].item())
    assert torch.allclose(res.bboxes, torch.tensor([[25.0, 75.0, 75.0, 125.0]]))


def test_num_dets_keeps_the_best_queries_by_score():
    torch.manual_seed(0)
    logits, boxes = torch.randn(6, 4), torch.rand(6, 4)
    meta = dict(img_shape=(10, 10))
    every = DETRHead(**TINY_HEAD).postprocess(logits, boxes, meta)  # query order
    best = DETRHead(**TINY_HEAD, num_dets=4).postprocess(logits, boxes, meta)
    order = every.scores.argsort(descending=True)[:4]
    assert torch.equal(best.scores, every.scores[order])
    assert torch.equal(best.labels, every.labels[order])
    assert torch.equal(best.bboxes, every.bboxes[order])
    assert every.queries.tolist() == list(range(6)) and torch.equal(best.queries, order)
    assert len(DETRHead(**TINY_HEAD, num_dets=100).postprocess(logits, boxes, meta)) == 6


@MODELS.register_module(name='_TinyConvBackbone', force=True)
class _TinyConvBackbone(torch.nn.Module):
    """Stride-8 conv stem, enough to run DETR end to end."""
    out_channels, out_strides = [8], [8]

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 8, 8)

    def forward(self, x):
        return (self.conv(x),)


def _detr():
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(dict(
            type='DETR', backbone=dict(type='_TinyConvBackbone'),
            bbox_head=dict(type='DETRHead', **{k: v for k, v in TINY_HEAD.items() if k != 'in_channels'}),
            data_preprocessor=dict(type='DetDataPreprocessor', mean=[0, 0, 0], std=[255, 255, 255],
                                   pad_size_divisor=8)))


def test_detr_modes_and_empty_image():
    torch.manual_seed(0)
    model = _detr()
    data = dict(inputs=[torch.randint(0, 255, (3, 32, 40), dtype=torch.uint8),
                        torch.randint(0, 255, (3, 27, 30), dtype=torch.uint8)],
                data_samples=[_sample((32, 40), [[2, 3, 20, 30]], [1]), _sample((27, 30))])
    batch = model.data_preprocessor(data, training=True)
    assert batch['inputs'].shape == (2, 3, 32, 40)
    assert batch['data_samples'][1].batch_input_shape == (32, 40)
    losses = model(**batch, mode='loss')
    assert {'loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls'} <= set(losses)
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

    model.eval()
    with torch.no_grad():
        preds = model(**model.data_preprocessor(data), mode='predict')
        out = model(torch.rand(1, 3, 32, 32), None, mode='tensor')
    assert preds[0].pred_instances.bboxes.shape == (5, 4)
    assert (preds[1].pred_instances.bboxes[:, 2] <= 30).all()
    assert out['pred_logits'].shape == (2, 1, 5, 4) and out['pred_boxes'].shape == (2, 1, 5, 4)
    with pytest.raises(ValueError, match='mode'):
        model(torch.rand(1, 3, 32, 32), None, mode='bogus')
