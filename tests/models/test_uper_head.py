"""UperNet's pieces checked by hand: pyramid pooling, UPerHead's shapes and FCNHead's forms;
an UperNet segmentor's losses and that its auxiliary head is left out of prediction.
(Equality with MMSegmentation's heads: tests/checkpoint/test_openmmlab_upernet.py.)"""
import pytest
import torch
from mmengine.structures import PixelData
from torch import nn

from densevit.models.heads.fcn_head import FCNHead
from densevit.models.heads.uper_head import UPerHead
from densevit.models.layers.pyramid_pooling import PyramidPooling
from densevit.registry import MODELS
from densevit.structures import DataSample

K = 3


def _identity_1x1(conv):
    """A 1x1 ``nn.Conv2d`` of C -> C channels made the identity (bias 0)."""
    with torch.no_grad():
        conv.weight.copy_(torch.eye(conv.out_channels)[:, :, None, None])
        if conv.bias is not None:
            conv.bias.zero_()


def test_pyramid_pooling_of_a_constant_map_is_the_branch_of_the_constant():
    ppm = PyramidPooling((1, 2, 3, 6), in_channels=2, channels=3, norm_cfg=None, act_cfg=None)
    x = torch.tensor([1.5, -2.0]).view(1, 2, 1, 1).expand(2, 2, 7, 5)  # every pixel (1.5, -2)
    outs = ppm(x)
    assert len(outs) == 4 and all(o.shape == (2, 3, 7, 5) for o in outs)
    for (_, module), out in zip(ppm, outs, strict=True):
        conv = module.conv
        value = conv.weight[:, :, 0, 0] @ torch.tensor([1.5, -2.0]) + conv.bias  # W c + b
        torch.testing.assert_close(out, value.view(1, 3, 1, 1).expand_as(out))
    # the keys are mmseg's PPM's: Sequential(pool, ConvModule) per scale
    assert '3.1.conv.weight' in ppm.state_dict() and ppm.pool_scales == (1, 2, 3, 6)


def test_pyramid_pooling_bins_and_bilinear_upsampling_by_hand():
    """Columns a a b b (rows alike): 2 bins per side average to (a, b); upsampled
    bilinearly (align_corners=False) to 4 columns: a, 3a/4 + b/4, a/4 + 3b/4, b. One bin is
    the mean (a + b) / 2 everywhere."""
    a, b = 2.0, 6.0
    x = torch.tensor([a, a, b, b]).expand(1, 1, 4, 4)
    ppm = PyramidPooling((1, 2), in_channels=1, channels=1, norm_cfg=None, act_cfg=None)
    for _, module in ppm:
        _identity_1x1(module.conv)
    whole, halves = ppm(x)
    assert torch.allclose(whole, torch.full((1, 1, 4, 4), (a + b) / 2))
    row = torch.tensor([a, 0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b, b])
    torch.testing.assert_close(halves, row.expand(1, 1, 4, 4))


def _pyramid(B=2, channels=(8, 16, 24, 32), size=32):
    return tuple(torch.randn(B, c, size // s, size // s)
                 for c, s in zip(channels, (4, 8, 16, 32), strict=True))


def _samples(labels):
    return [DataSample(gt_sem_seg=PixelData(data=label[None]),
                       metainfo=dict(img_shape=tuple(label.shape),
                                     ori_shape=tuple(label.shape))) for label in labels]


def test_uper_head_shapes_names_and_loss():
    head = UPerHead(in_channels=[8, 16, 24, 32], channels=12, num_classes=K)
    feats = _pyramid()
    logits = head(feats)
    assert logits.shape == (2, K, 8, 8)  # the finest map's size
    # mmseg's names: three laterals and FPN convs (not the top), four pool branches
    assert {'psp_modules.3.1.conv.weight', 'bottleneck.bn.running_var',
            'lateral_convs.2.conv.weight', 'fpn_convs.2.bn.weight', 'fpn_bottleneck.conv.weight',
            'conv_seg.bias'} <= set(head.state_dict())
    assert len(head.lateral_convs) == len(head.fpn_convs) == 3
    assert head.bottleneck.conv.in_channels == 32 + 4 * 12  # the top map and 4 pool branches
    assert head.fpn_bottleneck.conv.in_channels == 4 * 12
    losses = head.loss(feats, _samples(torch.randint(0, K, (2, 32, 32))))
    assert set(losses) == {'loss_ce', 'acc_seg'} and torch.isfinite(losses['loss_ce'])
    # the pyramid may be read in part, and a single level is pooling + bottleneck alone
    assert UPerHead(in_channels=[16, 32], in_index=[1, 3], channels=4,
                    num_classes=K)(feats).shape == (2, K, 4, 4)
    one = UPerHead(in_channels=[32], in_index=[3], channels=4, num_classes=K)
    assert len(one.lateral_convs) == 0 and one(feats).shape == (2, K, 1, 1)
    with pytest.raises(ValueError, match='UPerHead reads several maps'):
        UPerHead(in_channels=32, in_index=3, channels=4, num_classes=K)


def test_fcn_head_forms():
    x = (torch.randn(2, 6, 5, 7),)
    head = FCNHead(in_channels=6, channels=4, num_convs=2, concat_input=True, in_index=0,
                   num_classes=K)
    assert head(x).shape == (2, K, 5, 7)
    assert head.conv_cat.conv.in_channels == 6 + 4 and len(head.convs) == 2
    dilated = FCNHead(in_channels=6, channels=4, num_convs=1, dilation=2, concat_input=False,
                      in_index=0, num_classes=K)
    assert dilated(x).shape == (2, K, 5, 7) and dilated.conv_cat is None
    assert dilated.convs[0].conv.dilation == (2, 2) and dilated.convs[0].conv.padding == (2, 2)
    # num_convs=0, no concatenation: the classifier alone on the input (dropout off)
    bare = FCNHead(in_channels=6, channels=6, num_convs=0, concat_input=False, in_index=0,
                   num_classes=K, dropout_ratio=0).eval()
    assert set(bare.state_dict()) == {'conv_seg.weight', 'conv_seg.bias'}
    torch.testing.assert_close(bare(x), bare.conv_seg(x[0]))
    with pytest.raises(ValueError, match='channels \\(4\\) must equal in_channels \\(6\\)'):
        FCNHead(in_channels=6, channels=4, num_convs=0, in_index=0, num_classes=K)
    with pytest.raises(ValueError, match='FCNHead reads one map'):
        FCNHead(in_channels=[6], channels=4, in_index=[0], num_classes=K)


def _upernet():
    norm = dict(type='BN')
    return MODELS.build(dict(
        type='EncoderDecoder',
        backbone=dict(type='SwinTransformer', arch=dict(embed_dims=8, depths=(1, 1, 1),
                                                        num_heads=(1, 1, 2)),
                      window_size=4, out_indices=(0, 1, 2), drop_path_rate=0.),
        decode_head=dict(type='UPerHead', in_channels=[8, 16, 32], in_index=[0, 1, 2],
                         channels=8, num_classes=K, norm_cfg=norm),
        auxiliary_head=dict(type='FCNHead', in_channels=16, in_index=1, channels=8,
                            num_convs=1, concat_input=False, num_classes=K, norm_cfg=norm,
                            loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4))))


def test_upernet_losses_and_prediction_without_the_auxiliary_head():
    torch.manual_seed(0)
    model = _upernet()
    samples = _samples(torch.randint(0, K, (2, 32, 32)))
    x = torch.randn(2, 3, 32, 32)
    losses = model(x, samples, mode='loss')
    assert set(losses) == {'decode.loss_ce', 'decode.acc_seg', 'aux_0.loss_ce', 'aux_0.acc_seg'}
    # the auxiliary loss is 0.4 x the cross-entropy of its own logits
    model.eval()
    with torch.no_grad():
        aux = model.auxiliary_head[0]
        unweighted = nn.functional.cross_entropy(
            nn.functional.interpolate(aux(model.extract_feat(x)), size=(32, 32),
                                      mode='bilinear'),
            torch.stack([s.gt_sem_seg.data[0] for s in samples]))
        weighted = model(x, samples, mode='loss')['aux_0.loss_ce']
    assert weighted.item() == pytest.approx(0.4 * unweighted.item(), rel=1e-5)
    # prediction never runs the auxiliary head
    with torch.no_grad():
        before = model.predict(x)[0].seg_logits.data
        model.auxiliary_head = None
        after = model.predict(x)[0].seg_logits.data
    assert torch.equal(before, after)
