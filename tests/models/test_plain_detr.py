"""Plain-DETR's head: BoxRPB against a brute-force loop and hand-computed offsets, the
one-to-many branch against hand-built masks / targets, and the branches kept apart."""
import math

import pytest
import torch
from mmengine.structures import InstanceData

from densevit.models.heads.one_to_many import hybrid_attn_mask, repeat_targets
from densevit.models.layers.box_rpb import BoxRelativePositionBias, box_pixel_offsets
from densevit.registry import MODELS
from densevit.structures import DataSample


def test_box_offsets_hand_computed():
    # a box covering the middle half of a 2 x 2 map of 8-pixel cells: x1 = y1 = 4, x2 = y2 = 12;
    # cell centres at 4 and 12 pixels
    box = torch.tensor([[[0.5, 0.5, 0.5, 0.5]]])
    dx, dy = box_pixel_offsets(box, (2, 2), stride=8, mode='linear')
    assert dx[0, 0].tolist() == [[0.0, 8.0], [-8.0, 0.0]]
    assert dy[0, 0].tolist() == [[0.0, 8.0], [-8.0, 0.0]]
    dx, _ = box_pixel_offsets(box, (2, 2), stride=8, mode='log8')
    third = math.log2(9) / 3  # sign(d) * log2(|d| + 1) / log2(8)
    assert torch.allclose(dx[0, 0], torch.tensor([[0.0, third], [-third, 0.0]]))


@pytest.mark.parametrize('mode', ['log8', 'linear'])
def test_box_rpb_equals_a_per_pixel_loop(mode):
    torch.manual_seed(0)
    rpb = BoxRelativePositionBias(num_heads=3, hidden_dims=8, stride=4, mode=mode)
    H, W = 3, 5
    boxes = torch.rand(2, 4, 4) * 0.6 + 0.2
    bias = rpb(boxes, (H, W))
    assert bias.shape == (2, 3, 4, H * W)

    def squash(d):
        return math.copysign(math.log2(abs(d) + 1) / 3, d) if mode == 'log8' else d

    for b in range(2):
        for q in range(4):
            cx, cy, w, h = boxes[b, q].tolist()
            x1, x2 = (cx - w / 2) * W * 4, (cx + w / 2) * W * 4
            y1, y2 = (cy - h / 2) * H * 4, (cy + h / 2) * H * 4
            for i in range(H):
                for j in range(W):
                    px, py = (j + 0.5) * 4, (i + 0.5) * 4
                    ex = rpb.mlp_x(torch.tensor([squash(x1 - px), squash(x2 - px)]))
                    ey = rpb.mlp_y(torch.tensor([squash(y1 - py), squash(y2 - py)]))
                    assert torch.allclose(bias[b, :, q, i * W + j], ex + ey, atol=1e-5)


def test_box_rpb_training_gradients_equal_autograd_through_the_mlps():
    # in training BoxRPB's offset MLPs run through a hand-written backward (_OffsetMLP);
    # reference: autograd through nn.Linear / nn.ReLU on the same offsets, gradients of the
    # same weighted sum, every parameter and the boxes (float64, gradcheck-tight)
    torch.manual_seed(0)
    rpb = BoxRelativePositionBias(num_heads=3, hidden_dims=8, stride=4, local_init=2.0,
                                  local_pattern='corners').double()
    boxes = (torch.rand(2, 4, 4, dtype=torch.float64) * 0.6 + 0.2).requires_grad_()
    H, W = 3, 5
    weights = torch.randn(2, 3, 4, H * W, dtype=torch.float64)
    ours = (rpb(boxes, (H, W)) * weights).sum()
    grads = torch.autograd.grad(ours, [boxes, *rpb.parameters()])

    dx, dy = box_pixel_offsets(boxes, (H, W), 4)
    bx, by = rpb.mlp_x(dx), rpb.mlp_y(dy)  # [B, Q, W, heads], [B, Q, H, heads]
    ref = by[:, :, :, None, :] + bx[:, :, None, :, :]  # [B, Q, H, W, heads]
    ref = (ref.flatten(2, 3).permute(0, 3, 1, 2) * weights).sum()
    ref_grads = torch.autograd.grad(ref, [boxes, *rpb.parameters()])
    assert torch.allclose(ours, ref, rtol=0, atol=1e-12)
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.allclose(g, r, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda b: rpb(b, (H, W)), (boxes,))


def test_box_rpb_mode_is_checked():
    with pytest.raises(ValueError, match="'log8' or 'linear'"):
        BoxRelativePositionBias(num_heads=2, mode='log2')


def test_box_rpb_local_init_is_zero_inside_and_falls_outside():
    """local_init=a, the other hidden units silenced: the bias of a pixel is
    -a * (how far outside the box it lies along x + along y), in log8 offsets, by hand."""
    a = 3.0
    rpb = BoxRelativePositionBias(num_heads=2, hidden_dims=6, stride=8, local_init=a)
    with torch.no_grad():
        for mlp in (rpb.mlp_x, rpb.mlp_y):
            mlp[2].weight[:, 2:] = 0
    box = torch.tensor([[[0.5, 0.25, 0.25, 0.25]]])  # x 48-80 px, y 16-48 px of a 128² map
    bias = rpb(box, (16, 16))[0, :, 0].view(2, 16, 16)

    def outside(lo, hi, p):
        d = max(lo - p, p - hi, 0.0)
        return math.log2(d + 1) / 3

    for i in range(16):
        for j in range(16):
            px, py = (j + 0.5) * 8, (i + 0.5) * 8
            expect = -a * (outside(48, 80, px) + outside(16, 48, py))
            assert torch.allclose(bias[:, i, j], torch.full((2,), expect), atol=1e-5), (i, j)
    assert (bias[:, 2:6, 6:10] == 0).all()  # the 4 x 4 cells inside the box
    with pytest.raises(ValueError, match='local_init must be >= 0'):
        BoxRelativePositionBias(num_heads=2, local_init=-1.0)


def test_box_rpb_corners_pattern_by_hand():
    """local_pattern='corners': head 0 as 'inside'; head 1 -a*(|x1 - px| + |y1 - py|) (near
    the top-left corner), head 2 near the bottom-right, head 3 near the top-right, in log8
    offsets, by hand; the other hidden units silenced."""
    a = 2.0
    rpb = BoxRelativePositionBias(num_heads=4, hidden_dims=8, stride=8, local_init=a,
                                  local_pattern='corners')
    with torch.no_grad():
        for mlp in (rpb.mlp_x, rpb.mlp_y):
            mlp[2].weight[:, 4:] = 0
    box = torch.tensor([[[0.5, 0.25, 0.25, 0.25]]])  # x 48-80 px, y 16-48 px of a 128² map
    bias = rpb(box, (16, 16))[0, :, 0].view(4, 16, 16)

    def c(d):
        return math.log2(abs(d) + 1) / 3

    def outside(lo, hi, p):
        return c(max(lo - p, p - hi, 0.0))

    for i in range(16):
        for j in range(16):
            px, py = (j + 0.5) * 8, (i + 0.5) * 8
            expect = [-a * (outside(48, 80, px) + outside(16, 48, py)),
                      -a * (c(48 - px) + c(16 - py)), -a * (c(80 - px) + c(48 - py)),
                      -a * (c(80 - px) + c(16 - py))]
            assert torch.allclose(bias[:, i, j], torch.tensor(expect), atol=1e-5), (i, j)
    with pytest.raises(ValueError, match="'inside' or 'corners'"):
        BoxRelativePositionBias(num_heads=2, local_init=1.0, local_pattern='edges')
    with pytest.raises(ValueError, match='hidden_dims >= 4'):
        BoxRelativePositionBias(num_heads=2, hidden_dims=3, local_init=1.0,
                                local_pattern='corners')


def test_pixel_proposals_by_hand():
    """A 2x4 map whose last column is padding, base_size 0.2: a proposal per valid pixel
    centred on it in the valid part ((j + 0.5) / 3, (i + 0.5) / 2), width = height 0.2;
    the padded column +inf and not valid; the head passes its proposal_size on."""
    from densevit.models.heads.encoder_proposals import pixel_proposals
    mask = torch.zeros(1, 2, 4, dtype=torch.bool)
    mask[:, :, 3] = True
    logits, valid = pixel_proposals(mask.flatten(1), [(2, 4)], base_size=0.2)
    for i in range(2):
        for j in range(4):
            k = i * 4 + j
            if j == 3:
                assert not valid[0, k] and torch.isinf(logits[0, k]).all()
                continue
            expect = torch.tensor([(j + 0.5) / 3, (i + 0.5) / 2, 0.2, 0.2])
            assert valid[0, k]
            assert torch.allclose(logits[0, k].sigmoid(), expect, atol=1e-6)
    head = MODELS.build(dict(type='PlainDETRHead', num_classes=3, in_channels=32,
                             embed_dims=32, num_queries=4, num_heads=2,
                             num_decoder_layers=1, feedforward_channels=32, norm_groups=8,
                             proposal_size=0.2))
    assert head.proposals.base_size == 0.2


def test_hybrid_mask_hand_built():
    base = torch.tensor([[False, True], [False, False]])  # e.g. one DN query, one matching
    mask = hybrid_attn_mask(base, 2, 'cpu')
    expected = torch.tensor([[False, True, True, True],
                             [False, False, True, True],
                             [True, True, False, False],
                             [True, True, False, False]])
    assert torch.equal(mask, expected)


def test_repeat_targets():
    t = dict(labels=torch.tensor([2, 0]), boxes=torch.tensor([[0.1, 0.2, 0.3, 0.4],
                                                             [0.5, 0.6, 0.7, 0.8]]))
    [r] = repeat_targets([t], 3)
    assert r['labels'].tolist() == [2, 0, 2, 0, 2, 0]
    assert torch.equal(r['boxes'][4], t['boxes'][0]) and len(r['boxes']) == 6


def _head(**kw):
    cfg = dict(type='PlainDETRHead', num_classes=3, in_channels=16, embed_dims=32,
               num_queries=6, num_heads=4, num_decoder_layers=2, feedforward_channels=64,
               norm_groups=8, box_rpb=dict(hidden_dims=16, stride=8),
               one_to_many=dict(num_queries=12, k=3), num_dets=10,
               criterion=dict(type='SetCriterion', use_focal=True,
                              matcher=dict(type='HungarianMatcher', focal=True)))
    cfg.update(kw)
    return MODELS.build(cfg)


def _samples():
    out = []
    for w in (64, 48):
        ds = DataSample(metainfo=dict(img_shape=(48, w), ori_shape=(48, w),
                                      scale_factor=(1.0, 1.0)))
        ds.gt_instances = InstanceData(bboxes=torch.tensor([[1.0, 2.0, 20.0, 30.0],
                                                            [5.0, 5.0, 40.0, 40.0]]),
                                       labels=torch.tensor([0, 2]))
        out.append(ds)
    return out


def _inputs():
    torch.manual_seed(1)
    feat = torch.randn(2, 16, 6, 8)
    mask = torch.zeros(2, 6, 8, dtype=torch.bool)
    mask[1, :, 6:] = True  # the second image is 48 pixels wide: two padded columns
    return feat, mask


@pytest.mark.parametrize('two_stage', [True, False])
def test_one_to_many_queries_never_reach_the_one_to_one(two_stage):
    torch.manual_seed(0)
    head = _head(as_two_stage=two_stage, mixed_selection=two_stage,
                 dn_cfg=dict(num_dn_queries=4)).train()
    feat, mask = _inputs()
    samples = _samples()
    torch.manual_seed(5)
    out = head(feat, mask, samples)
    assert out['pred_logits'].shape == (2, 2, 6, 3)
    assert out['one_to_many']['pred_boxes'].shape == (2, 2, 12, 4)
    # change only what the one-to-many queries start from: the one-to-one outputs stay
    table = head.content_embed if two_stage else head.query_embed
    with torch.no_grad():
        table.weight[6:] += torch.randn_like(table.weight[6:])
    torch.manual_seed(5)  # the same denoising draws
    again = head(feat, mask, samples)
    assert torch.allclose(again['pred_logits'], out['pred_logits'], atol=1e-6)
    assert torch.allclose(again['pred_boxes'], out['pred_boxes'], atol=1e-6)
    assert not torch.allclose(again['one_to_many']['pred_logits'],
                              out['one_to_many']['pred_logits'])
    losses = head.loss(feat, mask, samples)
    assert {'o2m_loss_cls', 'o2m_d0.loss_bbox', 'dn_loss_iou', 'loss_cls'} <= set(losses)
    assert ('enc_loss_cls' in losses) == two_stage


def test_inference_has_only_the_one_to_one_queries_none_from_padding():
    torch.manual_seed(0)
    head = _head(num_queries=40, one_to_many=None).eval()
    feat, mask = _inputs()
    with torch.no_grad():
        out = head(feat, mask)
        assert out['pred_logits'].shape == (2, 2, 40, 3) and 'one_to_many' not in out
        memory = head.input_proj[0](feat).flatten(2).transpose(1, 2)
        _, _, reference, _ = head.matching_queries(memory, mask.flatten(1), (6, 8))
    # 40 queries, 36 unpadded pixels in the narrow image (6 x 6): the padded pixels rank
    # last, so its first 36 references are real boxes (< 1) and only the rest are padding's
    valid = (reference[1] < 1).all(-1)
    assert valid.sum() == 36 and valid[:36].all()
    assert (reference[0] < 1).all()


@pytest.mark.parametrize('bad', [dict(num_queries=0, k=2), dict(num_queries=10, k=0),
                                 dict(num_queries=10, k=1.5)])
def test_one_to_many_values_are_checked(bad):
    name = 'num_queries' if bad['num_queries'] == 0 else 'k'
    with pytest.raises(ValueError, match=f'one_to_many.{name} must be an integer >= 1'):
        _head(one_to_many=bad)


def test_mixed_selection_needs_two_stage():
    with pytest.raises(ValueError, match='mixed_selection=True needs as_two_stage=True'):
        _head(as_two_stage=False, mixed_selection=True)


def test_more_two_stage_queries_than_pixels_is_a_clear_error():
    head = _head(num_queries=40).train()  # 40 + 12 one-to-many queries, 6 x 8 = 48 pixels
    feat, mask = _inputs()
    with pytest.raises(ValueError, match=r'picks 52 queries .* has only 48 \(shapes \[\(6, 8\)\]'):
        head(feat, mask, _samples())
