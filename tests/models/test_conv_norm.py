"""A convolution + frozen norm run as one convolution (``layers/conv_norm.py``) equals the
two steps, in values and in gradients; norms that use batch statistics are left alone; the
ResNet that uses it (channels-last or not) equals the unfolded computation to 1e-5."""
import pytest
import torch
from torch import nn

from densevit.models.backbones.resnet import ResNet
from densevit.models.layers.conv_norm import affine_of, conv_norm
from densevit.models.layers.frozen_bn import FrozenBatchNorm2d


def _random_stats_(norm, seed):
    g = torch.Generator().manual_seed(seed)
    for name in ('weight', 'bias', 'running_mean'):
        getattr(norm, name).data.copy_(torch.randn(norm.num_features, generator=g) * 0.5)
    norm.running_var.copy_(torch.rand(norm.num_features, generator=g) + 0.5)


@pytest.mark.parametrize('norm_type', ['frozen', 'bn_eval'])
@pytest.mark.parametrize('stride,padding,dilation', [(1, 0, 1), (2, 1, 1), (1, 2, 2)])
def test_folded_equals_two_steps_values_and_grads(norm_type, stride, padding, dilation):
    torch.manual_seed(0)
    k = 1 if padding == 0 else 3
    conv = nn.Conv2d(6, 10, k, stride, padding, dilation, bias=False)
    norm = FrozenBatchNorm2d(10) if norm_type == 'frozen' else nn.BatchNorm2d(10).eval()
    _random_stats_(norm, 1)
    x = torch.randn(2, 6, 13, 11, requires_grad=True)
    ref = norm(conv(x))
    ref_grads = torch.autograd.grad(ref.square().sum(), (x, conv.weight))
    out = conv_norm(conv, norm, x)
    grads = torch.autograd.grad(out.square().sum(), (x, conv.weight))
    assert out.shape == ref.shape
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g - r).abs().max() <= 1e-5 * r.abs().max()


def test_norms_with_batch_statistics_are_not_folded():
    conv, bn = nn.Conv2d(3, 4, 1, bias=False), nn.BatchNorm2d(4)
    assert affine_of(bn) is None  # training mode: batch statistics
    assert affine_of(nn.BatchNorm2d(4, track_running_stats=False).eval()) is None
    assert affine_of(nn.GroupNorm(2, 4)) is None
    x = torch.randn(2, 3, 5, 5)
    assert torch.equal(conv_norm(conv, bn, x), bn(conv(x)))  # the two steps, exactly
    # ... and the BatchNorm updated its running statistics as usual
    assert bn.num_batches_tracked.item() == 2


def _two_step_forward(resnet, x):
    """The ResNet forward written out with every convolution and norm as separate steps."""
    def block(b, x):
        identity = x if b.downsample is None else b.downsample[1](b.downsample[0](x))
        out = torch.relu(b.bn1(b.conv1(x)))
        if hasattr(b, 'conv3'):
            out = torch.relu(b.bn2(b.conv2(out)))
            out = b.bn3(b.conv3(out))
        else:
            out = b.bn2(b.conv2(out))
        return torch.relu(out + identity)
    x = resnet.maxpool(torch.relu(resnet.bn1(resnet.conv1(x))))
    outs = []
    for i in range(resnet.num_stages):
        for b in getattr(resnet, f'layer{i + 1}'):
            x = block(b, x)
        outs.append(x)
    return [outs[i] for i in resnet.out_indices]


@pytest.mark.parametrize('depth', [18, 50])
@pytest.mark.parametrize('channels_last', [True, False])
def test_resnet_equals_unfolded(depth, channels_last):
    torch.manual_seed(0)
    model = ResNet(depth=depth, base_channels=8, stage_blocks=(1, 2, 1, 1),
                   out_indices=(0, 1, 2, 3), channels_last=channels_last).eval()
    for i, m in enumerate(model.modules()):
        if isinstance(m, FrozenBatchNorm2d):
            _random_stats_(m, i)
    assert model.conv1.weight.is_contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    x = torch.randn(2, 3, 70, 58)
    with torch.no_grad():
        ref = _two_step_forward(model, x)
        out = model(x)
    for o, r in zip(out, ref, strict=True):
        assert o.is_contiguous()
        assert (o - r).abs().max() <= 1e-5 * r.abs().max()
    # the layout is not part of the checkpoint
    other = ResNet(depth=depth, base_channels=8, stage_blocks=(1, 2, 1, 1),
                   out_indices=(0, 1, 2, 3), channels_last=not channels_last).eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        for a, b in zip(other(x), out, strict=True):
            assert (a - b).abs().max() <= 1e-5 * b.abs().max()
