"""Deformable DETR and denoising: DN attention mask, DN losses, top-k post-processing, modes,
two-stage training."""
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

from densevit.models.heads.denoising import DenoisingQueries
from densevit.models.heads.detr_head import DETRHead
from densevit.registry import MODELS
from densevit.structures import DataSample

FOCAL = dict(type='SetCriterion', use_focal=True,
             loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0),
             matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0))


def _sample(img_shape, boxes=(), labels=()):
    ds = DataSample(metainfo=dict(img_shape=img_shape, ori_shape=img_shape,
                                  scale_factor=(1.0, 1.0)))
    gt = InstanceData()
    gt.bboxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    gt.labels = torch.tensor(labels, dtype=torch.int64)
    ds.gt_instances = gt
    return ds


def _model(refine=False, dn_cfg=None, two_stage=False):
    DefaultScope.get_instance(f'test_deformable_detr_{id(object())}', scope_name='densevit')
    return MODELS.build(dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3)),
        bbox_head=dict(type='DeformableDETRHead', num_classes=3, embed_dims=32, num_queries=6,
                       num_feature_levels=4, with_box_refine=refine, num_dets=10,
                       as_two_stage=two_stage, dn_cfg=dn_cfg, criterion=FOCAL,
                       transformer=dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                        num_decoder_layers=2, feedforward_channels=32,
                                        dropout=0.0))))


def test_dn_attention_mask_by_hand():
    mask = DenoisingQueries(3, 8).attn_mask(groups=2, group_size=2, num_queries=3,
                                            device='cpu')
    X, o = True, False
    expect = torch.tensor([
        # g0 g0 g1 g1 q  q  q
        [o, o, X, X, o, o, o],  # group 0 sees itself and the matching queries
        [o, o, X, X, o, o, o],
        [X, X, o, o, o, o, o],  # group 1
        [X, X, o, o, o, o, o],
        [X, X, X, X, o, o, o],  # matching queries see no DN query
        [X, X, X, X, o, o, o],
        [X, X, X, X, o, o, o]])
    assert torch.equal(mask, expect)


def test_dn_queries_layout_and_indices():
    torch.manual_seed(0)
    dn = DenoisingQueries(3, 8, num_dn_queries=6, contrastive=True)
    targets = [dict(labels=torch.tensor([0, 2]), boxes=torch.tensor([[.5, .5, .2, .2],
                                                                     [.3, .3, .1, .1]])),
               dict(labels=torch.tensor([], dtype=torch.long), boxes=torch.zeros(0, 4))]
    out = dn(targets, num_queries=4)
    # pad 2, positive + negative halves -> group size 4, 6 // 4 -> 1 group
    assert (out['num_groups'], out['group_size'], out['num_dn']) == (1, 4, 4)
    assert out['tgt'].shape == (2, 4, 8) and out['attn_mask'].shape == (8, 8)
    assert out['indices'][0][0].tolist() == [0, 1] and out['indices'][0][1].tolist() == [0, 1]
    assert len(out['indices'][1][0]) == 0
    assert torch.all(out['tgt'][1] == 0)  # padding slots carry no content
    assert dn([targets[1]], 4) is None  # no GT in the batch: no denoising


@pytest.mark.parametrize('refine', [False, True])
def test_deformable_detr_losses_with_dn_and_empty_image(refine):
    torch.manual_seed(0)
    model = _model(refine, dn_cfg=dict(num_dn_queries=4)).train()
    x = torch.randn(2, 3, 64, 64)
    samples = [_sample((64, 48), [[1, 2, 30, 40], [10, 10, 20, 20]], [0, 2]),
               _sample((50, 64))]  # an image without objects
    losses = model(x, samples, mode='loss')
    for key in ('loss_cls', 'loss_bbox', 'loss_iou', 'dn_loss_cls', 'dn_loss_bbox',
                'd0.dn_loss_iou'):
        assert torch.isfinite(losses[key])
    sum(losses.values()).backward()
    # a batch with no objects at all: no DN queries, losses still finite
    losses = model(x, [_sample((64, 64)), _sample((64, 64))], mode='loss')
    assert 'dn_loss_cls' not in losses and all(torch.isfinite(v) for v in losses.values())
    model.eval()
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
        preds = model(x, samples, mode='predict')
    assert out['pred_logits'].shape == (2, 2, 6, 3) and 'dn' not in out
    assert preds[0].pred_instances.bboxes.shape == (10, 4)


@pytest.mark.parametrize('dn_cfg', [None, dict(num_dn_queries=4)])
def test_two_stage_trains_with_encoder_losses(dn_cfg):
    torch.manual_seed(0)
    model = _model(refine=True, dn_cfg=dn_cfg, two_stage=True).train()
    head = model.bbox_head
    assert not hasattr(head, 'query_embed') and len(head.class_embed) == 3  # 2 layers + encoder
    x = torch.randn(2, 3, 64, 64)
    samples = [_sample((64, 48), [[1, 2, 30, 40], [10, 10, 20, 20]], [0, 2]),
               _sample((50, 64))]
    losses = model(x, samples, mode='loss')
    for key in ('loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls', 'enc_loss_cls',
                'enc_loss_bbox', 'enc_loss_iou'):
        assert torch.isfinite(losses[key])
    assert ('dn_loss_cls' in losses) == (dn_cfg is not None)
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    for m in (head.proposals.memory_fc, head.proposals.pos_fc, head.class_embed[-1]):
        assert m.weight.grad is not None and m.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
        preds = model(x, samples, mode='predict')
    S = 8 * 8 + 4 * 4 + 2 * 2 + 1  # strides 8, 16, 32 and the extra 64
    assert out['enc_outputs']['pred_logits'].shape == (2, S, 3)
    assert out['pred_boxes'].shape == (2, 2, 6, 4) and torch.isfinite(out['pred_boxes']).all()
    assert preds[0].pred_instances.bboxes.shape == (10, 4)


def test_two_stage_needs_box_refinement():
    with pytest.raises(ValueError, match='with_box_refine'):
        _model(refine=False, two_stage=True)


def test_detr_with_dn_losses():
    DefaultScope.get_instance('test_detr_dn', scope_name='densevit')
    head = DETRHead(num_classes=3, in_channels=8, embed_dims=16, num_queries=5,
                    transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                                     feedforward_channels=32, dropout=0.0),
                    dn_cfg=dict(num_dn_queries=4)).train()
    feat, mask = torch.randn(2, 8, 4, 4), torch.zeros(2, 4, 4, dtype=torch.bool)
    samples = [_sample((32, 32), [[1, 2, 20, 30]], [1]), _sample((32, 32))]
    out = head(feat, mask, samples)
    assert out['pred_logits'].shape == (2, 2, 5, 4)
    assert out['dn']['pred_logits'].shape == (2, 2, 4, 4)  # 4 groups of 1
    losses = head.loss(feat, mask, samples)
    assert {'dn_loss_cls', 'dn_loss_bbox', 'd0.dn_loss_cls'} <= set(losses)
    assert all(torch.isfinite(v) for v in losses.values())
    # the matching queries never see the DN queries: their outputs equal a run without DN
    head.eval()
    plain = head(feat, mask, samples)
    assert torch.allclose(plain['pred_logits'], out['pred_logits'], atol=1e-5)


def test_topk_postprocess_hand_case():
    head = _model().bbox_head
    head.num_dets = 3
    logits = torch.tensor([[0.0, 5.0, -1.0],   # query 0: class 1 strongest overall
                           [4.0, 3.0, -9.0],   # query 1: classes 0 and 1 both in the top 3
                           [-5.0, -5.0, -5.0]])
    boxes = torch.tensor([[.5, .5, .2, .2], [.25, .25, .5, .5], [.5, .5, 1., 1.]])
    res = head.postprocess(logits, boxes, dict(img_shape=(100, 200)), rescale=False)
    assert res.labels.tolist() == [1, 0, 1]
    assert res.queries.tolist() == [0, 1, 1]  # the query behind each detection
    assert torch.allclose(res.scores, torch.tensor([5.0, 4.0, 3.0]).sigmoid())
    assert torch.allclose(res.bboxes, torch.tensor([[80., 40., 120., 60.], [0., 0., 100., 50.],
                                                    [0., 0., 100., 50.]]))


@pytest.mark.parametrize('two_stage', [False, True])
def test_deformable_detr_in_float64_and_bf16(two_stage):
    """Deformable DETR (box refinement; two-stage) cast whole to float64: fp32's losses to
    1e-4; under bf16 autocast its predictions stay float32 and its boxes within 1 pixel of
    fp32's on a 64-pixel image (the decoder and predictors run in float32)."""
    from densevit.utils.precision import autocast_context
    torch.manual_seed(0)
    model = _model(refine=True, two_stage=two_stage)
    x = torch.randn(2, 3, 64, 64)
    samples = [_sample((64, 48), [[1, 2, 30, 40], [10, 10, 20, 20]], [0, 2]),
               _sample((50, 64), [[5, 5, 40, 30]], [1])]
    ref = model.train()(x, samples, mode='loss')
    model.eval()
    with torch.no_grad():
        p32 = model(x, samples, mode='predict')
        p32 = [p.pred_instances.clone() for p in p32]
        with autocast_context('bf16', 'cpu'):
            p16 = model(x, samples, mode='predict')
    for a, b in zip(p32, p16, strict=True):
        b = b.pred_instances
        assert b.bboxes.dtype == b.scores.dtype == torch.float32
        assert (b.scores - a.scores).abs().max() < 0.02
        # top-k order may swap near-equal scores: each bf16 box against the nearest fp32
        # box of its label
        dist = (b.bboxes[:, None] - a.bboxes[None]).abs().amax(-1)
        dist[b.labels[:, None] != a.labels[None]] = float('inf')
        nearest = dist.amin(1)
        assert (nearest < 1.0).float().mean() >= 0.5, nearest
    losses = model.double().train()(x.double(), samples, mode='loss')
    for k, v in ref.items():
        assert losses[k].dtype == torch.float64, k
        torch.testing.assert_close(losses[k].float(), v, rtol=1e-4, atol=1e-4)
