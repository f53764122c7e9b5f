"""ViTDet's simple feature pyramid and the channel LayerNorm it uses."""
import pytest
import torch
from mmcv.cnn import build_norm_layer
from mmengine.registry import DefaultScope

from densevit.models.layers.layer_norm_2d import LayerNorm2d
from densevit.models.necks.simple_feature_pyramid import SimpleFeaturePyramid
from densevit.registry import MODELS


def test_layer_norm_2d_normalises_channels():
    torch.manual_seed(0)
    ln = build_norm_layer(dict(type='LN2d', eps=1e-6), 6)[1]
    assert isinstance(ln, LayerNorm2d)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(2, 6, 3, 4)
    ref = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (6,), ln.weight, ln.bias, 1e-6)
    torch.testing.assert_close(ln(x), ref.permute(0, 3, 1, 2))


def test_strides_and_shapes():
    with DefaultScope.overwrite_default_scope('densevit'):
        neck = MODELS.build(dict(type='SimpleFeaturePyramid', in_channels=32, out_channels=16))
    neck.init_weights()
    assert neck.out_channels == [16] * 4 and neck.out_strides == [4, 8, 16, 32]
    x = torch.randn(2, 32, 6, 10)  # a stride-16 map
    outs = neck((torch.randn(2, 8, 1, 1), x))  # reads the last backbone output
    assert [o.shape for o in outs] == [(2, 16, 24, 40), (2, 16, 12, 20), (2, 16, 6, 10),
                                       (2, 16, 3, 5)]
    sum(o.sum() for o in outs).backward()
    assert all(p.grad is not None for p in neck.parameters())
    # The 4x branch halves the channels twice, with a norm and GELU between the deconvs.
    assert [m.__class__.__name__ for m in neck.resample[0]] == [
        'ConvTranspose2d', 'LayerNorm2d', 'GELU', 'ConvTranspose2d']
    assert neck.resample[0][-1].out_channels == 8 and neck.resample[1][0].out_channels == 16


def test_subset_in_index_and_no_norm():
    neck = SimpleFeaturePyramid(in_channels=8, out_channels=4, scale_factors=(2, 0.5), in_index=0,
                                in_stride=8, norm_cfg=None)
    assert neck.out_strides == [4, 16]
    a, b = neck((torch.randn(1, 8, 4, 4), torch.randn(1, 3, 1, 1)))
    assert a.shape == (1, 4, 8, 8) and b.shape == (1, 4, 2, 2)
    assert neck.lateral_convs[0].conv.bias is not None  # no norm: convs keep biases
    with pytest.raises(ValueError, match='scale factor 3'):
        SimpleFeaturePyramid(in_channels=8, scale_factors=(3,))


def test_on_a_plain_vit():
    with DefaultScope.overwrite_default_scope('densevit'):
        vit = MODELS.build(dict(type='VisionTransformer', img_size=32, patch_size=16,
                                arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                          feedforward_channels=32)))
        neck = MODELS.build(dict(type='SimpleFeaturePyramid', in_channels=vit.out_channels[-1],
                                 out_channels=8, in_stride=vit.out_strides[-1]))
    outs = neck(vit(torch.randn(1, 3, 64, 32)))
    assert [tuple(o.shape[-2:]) for o in outs] == [(16, 8), (8, 4), (4, 2), (2, 1)]
    assert [64 // o.shape[-2] for o in outs] == neck.out_strides
