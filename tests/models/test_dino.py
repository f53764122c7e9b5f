"""DINO's head: contrastive denoising with DINO's corner noise and group rule, look forward
twice's gradient, mixed query selection, and a training step with an image without objects.
(Equality with MMDetection's DINO: tests/checkpoint/test_openmmlab_dino.py.)"""
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

from densevit.models.heads.denoising import DenoisingQueries
from densevit.registry import MODELS
from densevit.structures import DataSample


def _sample(img_shape, boxes=(), labels=()):
    ds = DataSample(metainfo=dict(img_shape=img_shape, ori_shape=img_shape,
                                  scale_factor=(1.0, 1.0)))
    ds.gt_instances = InstanceData(bboxes=torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                                   labels=torch.tensor(labels, dtype=torch.int64))
    return ds


def _model(**dn):
    DefaultScope.get_instance(f'test_dino_{id(object())}', scope_name='densevit')
    head = dict(type='DINOHead', num_classes=3, embed_dims=32, num_queries=6,
                num_feature_levels=4, num_dets=10,
                transformer=dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                 num_decoder_layers=2, feedforward_channels=32))
    head.update(dn)  # dn_cfg=None: no denoising (DINO's by default)
    return MODELS.build(dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3)),
        bbox_head=head))


def test_corner_noise_positives_inside_negatives_in_the_ring():
    """DINO's box noise: every corner of a positive moves by less than (w/2, h/2) times the
    scale, every corner of a negative by between 1x and 2x that (boxes far from the image
    border, so that nothing is clamped)."""
    torch.manual_seed(0)
    dn = DenoisingQueries(3, 8, box_noise_scale=0.8, noise='corners')
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.1], [0.4, 0.6, 0.1, 0.3]]).repeat(200, 1)
    half = boxes[:, 2:].repeat(1, 2) / 2 * 0.8

    def corners(b):
        return torch.cat([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], -1)
    pos = (corners(dn._noise_boxes(boxes, 0.0, 1.0)) - corners(boxes)).abs() / half
    neg = (corners(dn._noise_boxes(boxes, 1.0, 2.0)) - corners(boxes)).abs() / half
    eps = 1e-4
    assert pos.max() < 1 + eps and neg.min() > 1 - eps and neg.max() < 2 + eps
    assert pos.max() > 0.95 and neg.max() > 1.95  # the whole ranges are drawn


@pytest.mark.parametrize('rule,groups', [('queries', 1), ('boxes', 3)])
def test_group_rules(rule, groups):
    """``'boxes'`` (DINO's code): num_dn_queries // most boxes; ``'queries'``: the negatives
    count too."""
    dn = DenoisingQueries(3, 8, num_dn_queries=6, contrastive=True, group_rule=rule,
                          box_pos=False)
    targets = [dict(labels=torch.tensor([0, 2]), boxes=torch.tensor([[.5, .5, .2, .2],
                                                                     [.3, .3, .1, .1]]))]
    out = dn(targets, num_queries=4)
    assert out['num_groups'] == groups and out['num_dn'] == 4 * groups
    assert out['query_pos'] is None and not hasattr(dn.box_pos, 'layers')


def test_bad_noise_options_refused():
    with pytest.raises(ValueError, match="noise must be 'centre' or 'corners', got 'edges'"):
        DenoisingQueries(3, 8, noise='edges')
    with pytest.raises(ValueError, match="group_rule must be 'queries' or 'boxes'"):
        DenoisingQueries(3, 8, group_rule='groups')


def test_dino_trains_and_predicts():
    torch.manual_seed(0)
    model = _model().train()
    head = model.bbox_head
    assert head.dn.contrastive and head.dn.noise == 'corners' and head.dn.box_pos is None
    assert not hasattr(head.proposals, 'pos_fc')  # mixed selection: no projected queries
    x = torch.randn(2, 3, 64, 64)
    samples = [_sample((64, 48), [[1, 2, 30, 40], [10, 10, 20, 20]], [0, 2]),
               _sample((50, 64))]
    losses = model(x, samples, mode='loss')
    for key in ('loss_cls', 'd0.loss_bbox', 'enc_loss_cls', 'dn_loss_cls', 'd0.dn_loss_iou'):
        assert torch.isfinite(losses[key]), key
    sum(losses.values()).backward()
    assert head.content_embed.weight.grad.abs().sum() > 0
    assert head.query_pos_head.layers[0].weight.grad.abs().sum() > 0
    with torch.no_grad():  # inference: the 6 matching queries only, top-10 (query, class)
        preds = model.eval()(x, samples, mode='predict')
        out = model(x, samples, mode='tensor')
    assert out['pred_logits'].shape == (2, 2, 6, 3) and out['pred_boxes'].shape == (2, 2, 6, 4)
    assert 'dn' not in out and out['enc_outputs']['pred_logits'].shape == (2, 6, 3)
    assert [len(p.pred_instances.scores) for p in preds] == [10, 10]


def test_look_forward_twice_reaches_the_previous_box_predictor():
    """The last layer's box loss alone trains layer 0's box predictor (its box is the last
    layer's reference, not detached); Deformable DETR's refinement would not."""
    torch.manual_seed(0)
    model = _model(dn_cfg=None).train()
    for p in model.bbox_head.bbox_embed[0].parameters():  # zero at start: no gradient path
        torch.nn.init.normal_(p, std=0.1)
    samples = [_sample((64, 64), [[1, 2, 30, 40]], [1]), _sample((64, 64), [[5, 5, 9, 9]], [0])]
    losses = model(torch.randn(2, 3, 64, 64), samples, mode='loss')
    assert 'dn_loss_cls' not in losses
    losses['loss_bbox'].backward()
    grad = model.bbox_head.bbox_embed[0].layers[2].weight.grad
    assert grad is not None and grad.abs().sum() > 0
