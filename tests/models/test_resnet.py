"""ResNet backbone: sizes, torchvision key layout, equality with HF transformers' ResNet,
FrozenBN, frozen stages, dilation (DC5)."""
from pathlib import Path

import pytest
import torch
from mmcv.cnn import build_norm_layer
from mmengine.config import Config
from mmengine.registry import DefaultScope
from torch import nn

from densevit.checkpoint.resnet import convert_hf_resnet, convert_resnet
from densevit.models.backbones.resnet import ResNet
from densevit.models.layers.frozen_bn import FrozenBatchNorm2d
from densevit.registry import MODELS
from densevit.utils.random_init import randomize_

from hf_references import resnet_kwargs_from_hf_config


@pytest.mark.parametrize('depth,count', [(18, 11_176_512), (50, 23_508_032), (101, 42_500_160)])
def test_param_counts_match_torchvision_without_fc(depth, count):
    with torch.device('meta'):
        model = ResNet(depth=depth, norm_cfg=dict(type='BN'))
    assert sum(p.numel() for p in model.parameters()) == count


def test_torchvision_key_layout_and_checkpoint_extras():
    model = ResNet(depth=50, base_channels=8, stage_blocks=(1, 2, 1, 1), norm_cfg=dict(type='BN'))
    sd = model.state_dict()
    for k in ('conv1.weight', 'bn1.running_var', 'layer1.0.conv3.weight',
              'layer1.0.downsample.0.weight', 'layer1.0.downsample.1.weight',
              'layer2.1.bn2.bias', 'layer4.0.conv2.weight'):
        assert k in sd, k
    # A torchvision checkpoint also has the classifier: dropped, strict load still passes.
    sd = {**sd, 'fc.weight': torch.zeros(10, 256), 'fc.bias': torch.zeros(10)}
    frozen = ResNet(depth=50, base_channels=8, stage_blocks=(1, 2, 1, 1))  # FrozenBN
    frozen.load_state_dict(sd)  # num_batches_tracked dropped by FrozenBN
    assert isinstance(frozen.bn1, FrozenBatchNorm2d)
    # Stages after the last output are not built; their checkpoint weights are skipped.
    short = ResNet(depth=50, base_channels=8, stage_blocks=(1, 2, 1, 1), out_indices=(1,))
    assert not hasattr(short, 'layer3') and short.out_channels == [64]
    short.load_state_dict(sd)


@pytest.mark.parametrize('layer_type,hidden', [('bottleneck', [32, 64, 128, 256]),
                                               ('basic', [8, 16, 32, 64])])
def test_equals_hf_resnet(layer_type, hidden):
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=hidden, depths=[1, 2, 1, 1],
                                    layer_type=layer_type)
    hf = transformers.ResNetModel(cfg).eval()
    randomize_(hf, seed=1)
    ours = ResNet(**resnet_kwargs_from_hf_config(cfg), out_indices=(0, 1, 2, 3),
                  norm_cfg=dict(type='BN')).eval()
    ours.load_state_dict(convert_hf_resnet(hf.state_dict()))  # strict
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        ref = hf(x, output_hidden_states=True).hidden_states[1:]  # after each stage
        out = ours(x)
    assert ours.out_channels == hidden and ours.out_strides == [4, 8, 16, 32]
    for a, b in zip(out, ref, strict=True):
        # float rounding grows with the activations (to ~900 in the last stage here): the
        # folded convolution + norm (conv_norm.py) rounds differently from the two steps
        assert (a - b).abs().max() <= 5e-6 * b.abs().max() + 1e-5
    with pytest.raises(KeyError, match='no mapping'):
        convert_hf_resnet({'encoder.bogus.weight': torch.zeros(1)})
    plain = {'conv1.weight': torch.zeros(1)}
    assert convert_resnet(plain) is plain  # torchvision layout passes through


def test_frozen_bn_equals_batchnorm_in_eval():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(5).eval()
    randomize_(bn, seed=1)
    frozen = build_norm_layer(dict(type='FrozenBN'), 5)[1]
    assert isinstance(frozen, FrozenBatchNorm2d) and not list(frozen.parameters())
    frozen.load_state_dict(bn.state_dict())
    x = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(frozen(x), bn(x))


def test_frozen_stages_stay_frozen_and_eval():
    model = ResNet(depth=18, base_channels=8, frozen_stages=1, norm_cfg=dict(type='BN'),
                   out_indices=(0, 3))
    model.init_weights()
    model.train()
    frozen = [model.conv1, model.bn1, model.layer1]
    assert not any(p.requires_grad for m in frozen for p in m.parameters())
    assert all(not m.training for f in frozen for m in f.modules())
    assert all(p.requires_grad for p in model.layer2.parameters()) and model.layer2.training
    stats = model.layer1[0].bn1.running_mean.clone()
    outs = model(torch.randn(2, 3, 32, 32))
    assert torch.equal(model.layer1[0].bn1.running_mean, stats)  # eval: statistics not updated
    sum(o.sum() for o in outs).backward()
    assert model.conv1.weight.grad is None and model.layer2[0].conv1.weight.grad is not None


def test_norm_eval_keeps_batchnorm_in_eval():
    model = ResNet(depth=18, base_channels=8, norm_cfg=dict(type='BN'), norm_eval=True).train()
    assert all(not m.training for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    assert model.layer3.training  # only the norms


def test_dc5_and_out_order():
    model = ResNet(depth=50, base_channels=8, stage_blocks=(1, 1, 1, 3), strides=(1, 2, 2, 1),
                   dilations=(1, 1, 1, 2), out_indices=(3, 1))
    assert model.out_strides == [16, 8] and model.out_channels == [256, 64]
    # As torchvision: the first block of the dilated stage keeps the previous dilation.
    assert [b.conv2.dilation for b in model.layer4] == [(1, 1), (2, 2), (2, 2)]
    c5, c3 = model(torch.randn(1, 3, 64, 96))
    assert c5.shape == (1, 256, 4, 6) and c3.shape == (1, 64, 8, 12)


def test_bad_arguments():
    with pytest.raises(KeyError, match='depth'):
        ResNet(depth=42)
    with pytest.raises(IndexError):
        ResNet(depth=18, out_indices=(4,))


def test_detr_resnet50_config():
    cfg = Config.fromfile(str(Path(__file__).parents[2] / 'configs' / 'detr_resnet50.py'))
    assert cfg.optim_wrapper.paramwise_cfg.custom_keys.backbone.lr_mult == 0.1
    with DefaultScope.overwrite_default_scope('densevit'), torch.device('meta'):
        backbone = MODELS.build(cfg.model.backbone)
    assert backbone.out_channels == [2048] and backbone.out_strides == [32]
    assert isinstance(backbone.bn1, FrozenBatchNorm2d) and backbone.frozen_stages == 1
    trainable = sum(p.numel() for p in backbone.parameters() if p.requires_grad)
    assert trainable == 23_454_912 - 9408 - 212_992  # all convs less the stem and layer1


def test_init_cfg_pretrained_loads_torchvision_and_hf_layouts(tmp_path):
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[32, 64, 128, 256],
                                    depths=[1, 1, 1, 1])
    hf = transformers.ResNetModel(cfg).eval()
    randomize_(hf, seed=1)
    torch.save(hf.state_dict(), tmp_path / 'hf.pth')
    kwargs = dict(resnet_kwargs_from_hf_config(cfg), out_indices=(3,))
    from_hf = ResNet(**kwargs,
                     init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'hf.pth')))
    from_hf.init_weights()
    # torchvision layout (= ours, plus the classifier) under a detector's prefix
    tv = {f'backbone.0.body.{k}': v for k, v in from_hf.state_dict().items()}
    tv['backbone.0.body.fc.weight'] = torch.zeros(10, 256)
    torch.save(tv, tmp_path / 'tv.pth')
    from_tv = ResNet(**kwargs, init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'tv.pth'),
                                             prefix='backbone.0.body.'))
    from_tv.init_weights()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = hf(x).last_hidden_state
        assert (from_hf.eval()(x)[0] - ref).abs().max() < 1e-4
        assert (from_tv.eval()(x)[0] - ref).abs().max() < 1e-4
