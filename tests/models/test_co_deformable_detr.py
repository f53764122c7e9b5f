"""Co-Deformable-DETR's head: a training step with the ATSS auxiliary head and its
customized positive queries, inference equal to a plain two-stage Deformable DETR head
(mixed query selection, look forward twice) with the same weights, the positive queries'
embeddings by hand, and the levels check. (The shared parts' own tests, the positive
queries' choice and the ATSS head: tests/models/test_co_dino.py.)"""
import pytest
import torch
from test_co_dino import (  # the tiny model, a padded batch, the shared checks
    ATSS,
    _assert_predicts_alike,
    _backward_atss,
    _backward_positive_queries,
    _training_step,
)
from test_co_dino import _model as _tiny_model
from test_dino import _sample  # a DataSample with ground truth

from densevit.models.heads.collaborative_training import anchor_features
from densevit.models.heads.denoising import box_sine_embedding


def _model(head_type='CoDeformableDETRHead', **kw):
    """Co-DINO's tiny model (ResNet-18 at width 8, 4 levels) with a Co-Deformable-DETR
    head, no denoising; or the same query head without the auxiliary parts."""
    if head_type == 'CoDeformableDETRHead':
        extra = dict(aux_heads=[ATSS], max_pos_queries=5, aux_norm_groups=8)
    else:
        extra = dict(with_box_refine=True, as_two_stage=True, mixed_selection=True,
                     look_forward_twice=True)
    return _tiny_model(head_type, dn_cfg=None, **dict(extra, **kw))


def test_co_deformable_detr_trains_a_step():
    """Finite Deformable DETR (decoder layers, encoder proposals), ATSS and positive-query
    losses under their keys. The positive queries' losses reach their projections (anchor
    and feature), the head's embedding and, through the memory and the anchors' features,
    the encoder, not the ATSS head nor the matching queries; the ATSS losses reach the ATSS
    head, the extra level and the encoder, not the projections."""
    torch.manual_seed(0)
    model = _model()
    losses = _training_step(model)
    assert {'loss_cls', 'd0.loss_cls', 'enc_loss_cls', 'enc_loss_iou'} <= set(losses)
    assert not any(k.startswith('dn_') for k in losses)  # no denoising
    head = model.bbox_head
    _backward_positive_queries(model, losses)
    for m in (head.aux_pos_trans, head.aux_pos_trans_norm, head.aux_feat_trans,
              head.aux_feat_trans_norm, head.aux_head_embed, head.input_proj[0]):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters()), m
    assert head.content_embed.weight.grad is None  # matching queries take no part
    _backward_atss(model, losses)
    assert head.aux_pos_trans[0].weight.grad is None
    assert head.aux_feat_trans[0].weight.grad is None


def test_co_deformable_detr_predicts_as_deformable_detr():
    """The same weights in a plain DeformableDETRHead (two-stage, box refinement, mixed
    selection, look forward twice) give identical predictions and raw outputs: the
    auxiliary parts take no part in inference."""
    torch.manual_seed(0)
    _assert_predicts_alike(_model(), _model('DeformableDETRHead'), {
        'aux_heads', 'aux_downsample', 'aux_pos_trans', 'aux_pos_trans_norm',
        'aux_feat_trans', 'aux_feat_trans_norm', 'aux_head_embed'})


def test_positive_query_embeddings_by_hand():
    """Two queries on a 2-level map pair: the position and content halves of the anchor's
    projected sine embedding, the content plus the projected feature of the anchor's map
    location (level 1's second location is anchor 4 + 1), the position plus the head's
    vector."""
    torch.manual_seed(0)
    head = _model().bbox_head
    D = head.embed_dims
    maps = [torch.randn(1, D, 2, 2), torch.randn(1, D, 1, 2)]
    chosen = torch.tensor([[5, 2]])
    reference = torch.tensor([[[0.5, 0.4, 0.2, 0.3], [0.1, 0.9, 0.05, 0.1]]])
    tgt, query_pos = head.positive_query_embeddings(0, reference, maps, chosen)
    feats = torch.stack([maps[1][0, :, 0, 1], maps[0][0, :, 1, 0]])[None]
    assert torch.equal(anchor_features(maps, chosen), feats)
    both = head.aux_pos_trans_norm[0](head.aux_pos_trans[0](box_sine_embedding(reference, D // 2)))
    feat = head.aux_feat_trans_norm[0](head.aux_feat_trans[0](feats))
    assert torch.allclose(tgt, both[..., D:] + feat, atol=1e-6)
    assert torch.allclose(query_pos, both[..., :D] + head.aux_head_embed.weight[0], atol=1e-6)


def test_training_without_objects():
    """No ground truth anywhere: every positive query is a padding anchor, the box losses
    are zero and everything is finite."""
    torch.manual_seed(0)
    model = _model().train()
    losses = model(torch.randn(1, 3, 64, 64), [_sample((64, 64))], mode='loss')
    assert losses['loss_bbox_aux0'] == 0 and losses['loss_iou_aux0'] == 0
    assert all(torch.isfinite(v) for v in losses.values())


def test_aux_head_levels_must_match():
    """4 encoder levels + the extra one = 5 maps; an ATSS head with 4 strides is refused at
    build time, naming both."""
    with pytest.raises(ValueError, match=r'CoDeformableDETRHead: aux_heads\[0\] \(CoATSSHead\) '
                                         r"has 4 strides \(8, 16, 32, 64\), but reads the "
                                         r"encoder's 4 levels .* 5 maps"):
        _model(aux_heads=[dict(ATSS, strides=(8, 16, 32, 64))])


def test_mixed_selection_needs_two_stage():
    with pytest.raises(ValueError, match='mixed_selection=True needs as_two_stage=True'):
        _model(as_two_stage=False)
