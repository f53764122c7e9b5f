"""Feature2Pyramid (BEiT's UperNet neck): one rescaling per input map, channels kept."""
import pytest
import torch

from densevit.models.necks.feature2pyramid import Feature2Pyramid


def test_beit_pyramid_shapes_and_strides():
    neck = Feature2Pyramid(embed_dims=8, norm_cfg=dict(type='BN')).eval()
    maps = [torch.randn(2, 8, 5, 7) for _ in range(4)]
    outs = neck(maps)
    assert [tuple(o.shape) for o in outs] == [(2, 8, 20, 28), (2, 8, 10, 14), (2, 8, 5, 7),
                                              (2, 8, 2, 3)]
    assert neck.out_channels == [8] * 4 and neck.out_strides == [4, 8, 16, 32]
    assert outs[2] is maps[2]  # 1x: the map itself
    assert torch.equal(outs[3], torch.nn.functional.max_pool2d(maps[3], 2))
    # each map through its own branch: the 2x output depends on the second map only
    assert torch.equal(neck([maps[0], maps[1], maps[0], maps[0]])[1], outs[1])
    assert sorted(k.rsplit('.', 1)[0] for k in neck.state_dict()) == sorted(
        ['upsample_4x.0'] * 2 + ['upsample_4x.1'] * 5 + ['upsample_4x.3'] * 2
        + ['upsample_2x.0'] * 2)


def test_without_4x_and_with_quarter():
    neck = Feature2Pyramid(embed_dims=4, rescales=(2, 1, 0.5, 0.25), in_stride=8)
    outs = neck([torch.randn(1, 4, 8, 8) for _ in range(4)])
    assert [o.shape[-1] for o in outs] == [16, 8, 4, 2]
    assert neck.out_strides == [4, 8, 16, 32] and not hasattr(neck, 'upsample_4x')


@pytest.mark.parametrize('rescales', [(4, 3, 1, 0.5), (2, 2, 1, 0.5)])
def test_unknown_or_repeated_factor_is_refused(rescales):
    with pytest.raises(ValueError, match='must be distinct factors from'):
        Feature2Pyramid(embed_dims=4, rescales=rescales)


def test_wrong_number_of_maps_is_refused():
    neck = Feature2Pyramid(embed_dims=4, norm_cfg=dict(type='BN'))
    with pytest.raises(ValueError, match='1 input maps for 4 rescales.*out_indices'):
        neck([torch.randn(1, 4, 4, 4)])
