"""Tests for the segmentation heads, the MLA neck and the pixel cross-entropy loss."""
import math
import re

import pytest
import torch
from mmengine.structures import PixelData

from densevit.models.backbones.mit import MixVisionTransformer
from densevit.models.backbones.vit import VisionTransformer
from densevit.models.heads.decode_head import class_argmax, pixel_accuracy
from densevit.models.heads.segformer_head import SegformerHead
from densevit.models.heads.setr_mla_head import SETRMLAHead
from densevit.models.heads.setr_up_head import SETRUPHead
from densevit.models.losses.cross_entropy_loss import CrossEntropyLoss
from densevit.models.necks.mla_neck import MLANeck
from densevit.registry import MODELS
from densevit.structures.data_sample import DataSample

K = 4


def _samples(labels):
    """[B, H, W] long -> list of DataSample with gt_sem_seg [1, H, W]."""
    out = []
    for label in labels:
        ds = DataSample()
        ds.gt_sem_seg = PixelData(data=label[None])
        out.append(ds)
    return out


def _pyramid(B=2, channels=(8, 16, 24, 32), size=32):
    return tuple(torch.randn(B, c, size // s, size // s)
                 for c, s in zip(channels, (4, 8, 16, 32), strict=True))


# ------------------------------------------------------------------- loss
def test_cross_entropy_hand_case():
    # pixel 1: logits (0, 0, 0), label 0 -> -log(1/3) = log 3
    # pixel 2: logits (0, 0, log 2), label 2 -> -log(2/4) = log 2
    logits = torch.tensor([[0., 0.], [0., 0.], [0., math.log(2)]]).reshape(1, 3, 1, 2)
    label = torch.tensor([[[0, 2]]])
    expected = (math.log(3) + math.log(2)) / 2
    assert CrossEntropyLoss()(logits, label).item() == pytest.approx(expected)
    assert CrossEntropyLoss(loss_weight=0.4)(logits, label).item() == pytest.approx(
        0.4 * (math.log(3) + math.log(2)) / 2)
    # class weights scale each pixel; the mean is still over pixels (mmseg)
    weighted = CrossEntropyLoss(class_weight=[2., 1., 1.])(logits, label)
    assert weighted.item() == pytest.approx((2 * math.log(3) + math.log(2)) / 2)

    ignored = torch.tensor([[[0, 255]]])
    assert CrossEntropyLoss()(logits, ignored).item() == pytest.approx(math.log(3))
    # avg_non_ignore=False: the ignored pixel still counts in the denominator
    assert CrossEntropyLoss(avg_non_ignore=False)(logits, ignored).item() == pytest.approx(
        math.log(3) / 2)
    custom = torch.tensor([[[0, 7]]])
    assert CrossEntropyLoss(ignore_index=7)(logits, custom).item() == pytest.approx(math.log(3))


def test_cross_entropy_all_ignored_is_zero_with_finite_grad():
    logits = torch.randn(2, K, 5, 5, requires_grad=True)
    loss = CrossEntropyLoss()(logits, torch.full((2, 5, 5), 255))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.isfinite(logits.grad).all() and not logits.grad.any()


def test_cross_entropy_out_of_range_label_is_explained():
    with pytest.raises(ValueError, match='reduce_zero_label'):
        CrossEntropyLoss()(torch.randn(1, K, 2, 2), torch.full((1, 2, 2), K))
    # every bad value is named, below and above the range; the ignore value is not
    labels = torch.tensor([[[-1, K], [255, 0]]])
    with pytest.raises(ValueError, match=re.escape(f'found [-1, {K}]')):
        CrossEntropyLoss()(torch.randn(1, K, 2, 2), labels)
    assert torch.isfinite(CrossEntropyLoss()(torch.randn(1, K, 2, 2), labels.clamp(0, K - 1)))


@pytest.mark.parametrize('dim', [0, 1, 3])
def test_class_argmax_is_argmax_ties_included(dim):
    torch.manual_seed(0)
    x = torch.randint(0, 3, (6, 5, 7, 4)).float()  # many ties: the first maximum wins
    assert torch.equal(class_argmax(x, dim), x.argmax(dim))
    y = torch.randn(6, 5, 7, 4)
    assert torch.equal(class_argmax(y, dim), y.argmax(dim))


def test_pixel_accuracy_hand_case():
    # predicted classes [[0, 1], [2, 1]] via one-hot logits
    pred = torch.tensor([[0, 1], [2, 1]])
    logits = torch.nn.functional.one_hot(pred, 3).permute(2, 0, 1)[None].float()
    label = torch.tensor([[[0, 1], [1, 255]]])  # 2 of 3 valid pixels right
    assert pixel_accuracy(logits, label).item() == pytest.approx(200 / 3)
    assert pixel_accuracy(logits, torch.full_like(label, 255)).item() == 0.0


# ------------------------------------------------------------------ heads
def _segformer_head(**kw):
    return SegformerHead(in_channels=[8, 16, 24, 32], channels=16, num_classes=K, **kw)


def test_segformer_head_shapes_and_loss():
    head = _segformer_head()
    feats = _pyramid()
    assert head(feats).shape == (2, K, 8, 8)  # stride 4 of a 32x32 image
    assert head.predict(feats, [{}, {}]).shape == (2, K, 8, 8)
    labels = torch.randint(0, K, (2, 32, 32))
    labels[0, :4] = 255
    torch.manual_seed(1)  # the same dropout draw in the loss and in the check below
    losses = head.loss(feats, _samples(labels))  # logits resized 8 -> 32
    assert set(losses) == {'loss_ce', 'acc_seg'}
    assert torch.isfinite(losses['loss_ce'])
    # acc_seg: percentage of the non-ignored pixels of the 32x32 labels predicted right
    torch.manual_seed(1)
    pred = torch.nn.functional.interpolate(head(feats), size=(32, 32), mode='bilinear',
                                           align_corners=False).argmax(1)
    valid = labels != 255
    expected = (pred[valid] == labels[valid]).float().mean().item() * 100
    assert losses['acc_seg'].item() == pytest.approx(expected, abs=1e-4)
    assert not losses['acc_seg'].requires_grad
    losses['loss_ce'].backward()
    assert head.fuse.conv.weight.grad is not None


@pytest.mark.parametrize('proj_type', ['linear', 'conv_norm_act'])
@pytest.mark.parametrize('norm_cfg', [dict(type='BN'), None])
def test_segformer_head_equals_project_upsample_concat_fuse(norm_cfg, proj_type):
    # the paper's order, written out: per-map projection (1x1 conv, or MMSegmentation's
    # conv-norm-ReLU), upsample, concatenate (deepest first), fuse conv-BN-ReLU,
    # classifier; values and parameter grads
    torch.manual_seed(0)
    head = _segformer_head(norm_cfg=norm_cfg, dropout_ratio=0.0, proj_type=proj_type).train()
    torch.nn.init.normal_(head.conv_seg.weight)
    feats = _pyramid()

    def reference():
        size = feats[0].shape[-2:]
        ups = [torch.nn.functional.interpolate(proj(x), size=size, mode='bilinear',
                                               align_corners=False)
               for proj, x in zip(head.linear_projs, feats, strict=True)]
        return head.cls_seg(head.fuse(torch.cat(ups[::-1], dim=1)))

    outs, grads = [], []
    for fn in (head, lambda f: reference()):
        head.zero_grad()
        out = fn(feats)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out.detach())
        grads.append({n: p.grad.clone() for n, p in head.named_parameters()})
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    for name in grads[1]:  # (under BN the projection biases' true gradient is 0)
        diff = (grads[0][name] - grads[1][name]).abs().max().item()
        assert diff <= 1e-4 * max(grads[1][name].abs().max().item(), 1.0), (name, diff)


def test_head_loss_all_ignored_is_zero_with_finite_grads():
    head = _segformer_head()
    losses = head.loss(_pyramid(), _samples(torch.full((2, 32, 32), 255)))
    assert losses['loss_ce'].item() == 0.0 and losses['acc_seg'].item() == 0.0
    losses['loss_ce'].backward()
    for name, p in head.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


def test_head_losses_with_same_name_are_summed():
    head = _segformer_head(loss_decode=[dict(type='CrossEntropyLoss', loss_weight=1.0),
                                        dict(type='CrossEntropyLoss', loss_weight=0.5,
                                             loss_name='loss_half')])
    losses = head.loss(_pyramid(), _samples(torch.randint(0, K, (2, 32, 32))))
    assert losses['loss_half'].item() == pytest.approx(0.5 * losses['loss_ce'].item())


def test_head_input_checks():
    with pytest.raises(ValueError, match='in_index'):
        SegformerHead(in_channels=8, channels=16, num_classes=K, in_index=0)
    with pytest.raises(ValueError, match='in_index'):
        SegformerHead(in_channels=[8, 16], channels=16, num_classes=K, in_index=[0, 1, 2])
    with pytest.raises(ValueError, match='conv_norm_act'):
        _segformer_head(proj_type='mlp')
    head = _segformer_head()
    samples = _samples(torch.zeros(2, 32, 32, dtype=torch.long))
    samples[1].gt_sem_seg = PixelData(data=torch.zeros(1, 16, 16, dtype=torch.long))
    with pytest.raises(ValueError, match='pad'):
        head.loss(_pyramid(), samples)


def test_segformer_head_on_mit():
    backbone = MixVisionTransformer(arch=None, embed_dims=[8, 16, 24, 32],
                                    num_layers=[1, 1, 1, 1], num_heads=[1, 1, 2, 2])
    head = MODELS.build(dict(type='SegformerHead', in_channels=backbone.out_channels,
                             channels=16, num_classes=K))
    assert head(backbone(torch.randn(1, 3, 64, 48))).shape == (1, K, 16, 12)


def test_setr_naive_and_pup_output_stride():
    x = (torch.randn(2, 16, 4, 4),)  # a ViT/16 map of a 64x64 image
    naive = SETRUPHead(in_channels=16, channels=8, num_classes=K, in_index=0,
                       num_convs=1, up_scale=4, kernel_size=1)
    pup = SETRUPHead(in_channels=16, channels=8, num_classes=K, in_index=0,
                     num_convs=4, up_scale=2, kernel_size=3)
    assert naive(x).shape == (2, K, 16, 16)  # output stride 16 / 4 = 4
    assert pup(x).shape == (2, K, 64, 64)  # 16 / 2**4 = 1: full resolution
    assert len(pup.up_convs) == 4 and pup.up_convs[0].conv.kernel_size == (3, 3)
    losses = pup.loss(x, _samples(torch.randint(0, K, (2, 64, 64))))
    assert torch.isfinite(losses['loss_ce'])


def test_setr_up_head_layer_norm_is_over_channels():
    # classifier only (num_convs=0, dropout off): logits = conv_seg(LN_C(x))
    head = SETRUPHead(in_channels=6, channels=6, num_classes=K, in_index=0, num_convs=0,
                      dropout_ratio=0, norm_layer=dict(type='LN', eps=1e-6))
    x = torch.randn(1, 6, 3, 5)
    mean, var = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
    expected = head.conv_seg((x - mean) / torch.sqrt(var + 1e-6))
    torch.testing.assert_close(head((x,)), expected)


def test_setr_up_head_as_mla_auxiliary_and_checks():
    aux = SETRUPHead(in_channels=8, channels=8, num_classes=K, in_index=2, num_convs=0,
                     norm_layer=None, dropout_ratio=0)
    feats = tuple(torch.randn(1, 8, 4, 4) for _ in range(4))
    torch.testing.assert_close(aux(feats), aux.conv_seg(feats[2]))
    assert sum(p.numel() for p in aux.parameters()) == 8 * K + K
    with pytest.raises(ValueError, match='channels'):
        SETRUPHead(in_channels=8, channels=4, num_classes=K, in_index=0, num_convs=0)
    with pytest.raises(ValueError, match='int'):
        SETRUPHead(in_channels=[8, 8], channels=4, num_classes=K, in_index=[0, 1])


def test_setr_heads_on_vit_layers():
    vit = VisionTransformer(arch=dict(embed_dims=16, num_layers=4, num_heads=2,
                                      feedforward_channels=32),
                            img_size=32, patch_size=16, out_indices=(1, 3), final_norm=False)
    feats = vit(torch.randn(1, 3, 32, 32))
    head = SETRUPHead(in_channels=16, channels=8, num_classes=K, in_index=1)
    aux = SETRUPHead(in_channels=16, channels=8, num_classes=K, in_index=0,
                     loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))
    assert head(feats).shape == aux(feats).shape == (1, K, 8, 8)


# -------------------------------------------------------------------- MLA
def test_mla_neck_top_down_sum_exact():
    C = 3
    neck = MLANeck(in_channels=[C] * 4, out_channels=C, norm_layer=None)
    with torch.no_grad():  # 1x1 and 3x3 convs set to the identity
        for conv in neck.lateral_convs:
            conv.conv.weight.copy_(torch.eye(C)[:, :, None, None])
            conv.conv.bias.zero_()
        for conv in neck.out_convs:
            w = torch.zeros(C, C, 3, 3)
            w[:, :, 1, 1] = torch.eye(C)
            conv.conv.weight.copy_(w)
            conv.conv.bias.zero_()
    z = [torch.randn(2, C, 4, 4) for _ in range(4)]
    outs = neck(tuple(z))
    # S_4 = Z_4, S_3 = Z_3 + Z_4, S_2 = Z_2 + Z_3 + Z_4, S_1 = Z_1 + ... + Z_4
    for i in range(4):
        torch.testing.assert_close(outs[i], sum(z[i:]))


def test_mla_neck_shapes_and_pyramid_inputs():
    neck = MLANeck(in_channels=[16] * 4, out_channels=8, norm_cfg=dict(type='BN'),
                   act_cfg=dict(type='ReLU'))
    assert neck.out_channels == [8] * 4
    outs = neck(tuple(torch.randn(2, 16, 4, 4) for _ in range(4)))
    assert [o.shape for o in outs] == [(2, 8, 4, 4)] * 4
    # deeper maps of a pyramid are upsampled before the sum
    pyramid = MLANeck(in_channels=[8, 16, 24, 32], out_channels=8)
    assert [o.shape[-1] for o in pyramid(_pyramid())] == [8, 4, 2, 1]
    with pytest.raises(ValueError, match='levels'):
        neck(outs[:3])


def test_setr_mla_head():
    head = SETRMLAHead(in_channels=[8] * 4, channels=16, mla_channels=4, num_classes=K)
    feats = tuple(torch.randn(2, 8, 4, 4) for _ in range(4))
    assert head(feats).shape == (2, K, 16, 16)  # x4 upsampled: 1/16 -> 1/4
    losses = head.loss(feats, _samples(torch.randint(0, K, (2, 64, 64))))
    assert set(losses) == {'loss_ce', 'acc_seg'} and torch.isfinite(losses['loss_ce'])
    with pytest.raises(ValueError, match='mla_channels'):
        SETRMLAHead(in_channels=[8] * 4, channels=12, mla_channels=4, num_classes=K)


def test_mla_pipeline_from_registry():
    neck = MODELS.build(dict(type='MLANeck', in_channels=[16] * 4, out_channels=8))
    head = MODELS.build(dict(type='SETRMLAHead', in_channels=neck.out_channels, channels=16,
                             mla_channels=4, num_classes=K))
    feats = neck(tuple(torch.randn(1, 16, 2, 2) for _ in range(4)))
    assert head(feats).shape == (1, K, 8, 8)
