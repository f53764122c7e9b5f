"""densevit's UperNet equals HF transformers' ``UperNetForSemanticSegmentation`` on a Swin
backbone (the reference), loaded whole from HF's file (``save_pretrained``'s
``model.safetensors``; every saved tensor re-drawn by ``randomize_``, BatchNorm running
statistics included) through the converter (``densevit/checkpoint/upernet.py``), in two tiny
configurations:

- ``hub``: the ``openmmlab/upernet-swin-*`` heads in small (pool scales 1, 2, 3, 6; an FCN
  auxiliary head of one conv on stage 3, no input concatenation);
- ``concat``: other pool scales (1, 2, 4) and an auxiliary head of two convs with
  ``concat_input`` (its ``conv_cat`` mapped too).

Eval mode, at the config's 64 x 64 and at 70 x 99 (the image padded to whole patches, the
maps to whole windows): the backbone maps, the decode and auxiliary logits at the heads'
stride 4 and both resized to the input as HF's ``forward`` does (HF's ``logits``;
densevit's ``predict``) within 1e-4 (measured: 0, the same float operations);
the loss on labels with ignored pixels equals HF's (decode + 0.4 x auxiliary
cross-entropy). The file loads whole: converted strictly, no key missing, unexpected or
mis-shaped, only ``backbone.swin.layernorm`` dropped (the ``SwinModel`` final norm that
``SwinBackbone`` carries and never applies). Also through ``init_model`` on
``configs/upernet/upernet_swin_t_512x512_ade20k.py`` shrunk to the file's sizes, through the
converter command line, and from HF's module state dict (transformers 5 names).
"""
import re

import pytest
import torch
import torch.nn.functional as F
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model, model_layouts
from densevit.checkpoint.model import load_model_weights
from densevit.checkpoint.read import read_checkpoint
from densevit.structures import DataSample
from densevit.utils.random_init import randomize_

from tiny_run import REPO, load_tool

transformers = pytest.importorskip('transformers')

TOL = 1e-4
LAYOUT = 'Hugging Face UperNet (Swin)'
CONFIG = REPO / 'configs' / 'upernet' / 'upernet_swin_t_512x512_ade20k.py'
SWIN = dict(image_size=64, patch_size=4, embed_dim=16, depths=[2, 2, 2, 2],
            num_heads=[1, 2, 2, 4], window_size=7, mlp_ratio=2.0, drop_path_rate=0.0,
            out_features=['stage1', 'stage2', 'stage3', 'stage4'])
HEADS = {
    'hub': dict(hidden_size=32, pool_scales=[1, 2, 3, 6], auxiliary_channels=16,
                auxiliary_num_convs=1, auxiliary_concat_input=False, num_labels=5),
    'concat': dict(hidden_size=24, pool_scales=[1, 2, 4], auxiliary_channels=16,
                   auxiliary_num_convs=2, auxiliary_concat_input=True, num_labels=4),
}
SIZES = [(64, 64), (70, 99)]


def hf_config(heads):
    return transformers.UperNetConfig(backbone_config=transformers.SwinConfig(**SWIN),
                                      use_auxiliary_head=True, **HEADS[heads])


def model_options(c):
    """densevit's UperNet for the HF config ``c`` (see densevit/checkpoint/upernet.py), as
    ``cfg_options`` on the repository's UperNet-Swin recipe."""
    s = c.backbone_config
    widths = [s.embed_dim * 2 ** i for i in range(len(s.depths))]
    return {
        'model.backbone.arch': dict(_delete_=True, embed_dims=s.embed_dim, depths=s.depths,
                                    num_heads=s.num_heads),
        'model.backbone.patch_size': s.patch_size, 'model.backbone.window_size': s.window_size,
        'model.backbone.mlp_ratio': s.mlp_ratio, 'model.backbone.drop_path_rate': 0.0,
        'model.backbone.out_indices': (0, 1, 2, 3), 'model.backbone.always_shift': True,
        'model.decode_head.in_channels': widths, 'model.decode_head.channels': c.hidden_size,
        'model.decode_head.pool_scales': tuple(c.pool_scales),
        'model.decode_head.num_classes': c.num_labels, 'model.decode_head.dropout_ratio': 0.0,
        'model.decode_head.norm_cfg': dict(type='BN'),
        'model.auxiliary_head.in_channels': c.auxiliary_in_channels or widths[2],
        'model.auxiliary_head.in_index': 2,
        'model.auxiliary_head.channels': c.auxiliary_channels,
        'model.auxiliary_head.num_convs': c.auxiliary_num_convs,
        'model.auxiliary_head.concat_input': c.auxiliary_concat_input,
        'model.auxiliary_head.num_classes': c.num_labels,
        'model.auxiliary_head.dropout_ratio': 0.0,
        'model.auxiliary_head.norm_cfg': dict(type='BN'),
        'model.auxiliary_head.loss_decode.loss_weight': c.auxiliary_loss_weight,
    }


@pytest.fixture(scope='module', params=list(HEADS))
def hf_file(request, tmp_path_factory):
    """(name, HF model in eval mode with every saved tensor random, its model.safetensors)."""
    torch.manual_seed(0)
    hf = transformers.UperNetForSemanticSegmentation(hf_config(request.param))
    randomize_(hf, seed=1)
    path = tmp_path_factory.mktemp(f'hf_upernet_{request.param}')
    hf.save_pretrained(path)
    return request.param, hf.eval(), path / 'model.safetensors'


@pytest.fixture(scope='module')
def ours(hf_file):
    """densevit's model from the HF file through ``init_model`` (strict)."""
    _, hf, path = hf_file
    return init_model(CONFIG, path, cfg_options=model_options(hf.config))


def images(size, n=2):
    return torch.randn(n, 3, *size, generator=torch.Generator().manual_seed(sum(size)))


def max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def test_the_file_is_recognised_and_loads_whole(hf_file, ours):
    name, hf, path = hf_file
    state_dict = read_checkpoint(path)
    converted = convert_model(state_dict, strict=True)
    assert converted.layout == LAYOUT
    assert converted.options == {'always_shift': True}
    # no other layout even considers these keys
    others = [lay.name for lay in model_layouts(state_dict) if lay.name != LAYOUT
              and any(re.search(lay.signature, k) for k in state_dict)]
    assert others == []
    # the one key of the file that is no weight of densevit's model: SwinModel's final norm
    assert {'backbone.swin.layernorm.weight', 'backbone.swin.layernorm.bias'} <= set(state_dict)
    assert not any('layernorm' in k for k in converted)
    report = load_model_weights(ours, state_dict, path.name, strict=False)
    assert report.complete and report.found == report.total == len(ours.state_dict())
    assert {k for k in converted if k.startswith('auxiliary_head.')} == {
        k for k in ours.state_dict() if k.startswith('auxiliary_head.0.')}
    if name == 'concat':
        assert 'auxiliary_head.0.conv_cat.bn.running_var' in converted


@pytest.mark.parametrize('size', SIZES)
def test_logits_match_hf(hf_file, ours, size):
    """Backbone maps, decode and auxiliary logits at stride 4, both resized to the input
    (HF's ``logits``; densevit's ``predict``) within 1e-4."""
    name, hf, _ = hf_file
    assert not ours.training and ours.backbone.always_shift
    x = images(size)
    with torch.no_grad():
        ref = hf(pixel_values=x).logits
        ref_maps = hf.backbone(x).feature_maps
        ref_decode, ref_aux = hf.decode_head(ref_maps), hf.auxiliary_head(ref_maps)
        maps = ours.backbone(x)
        decode, aux = ours(x, mode='tensor'), ours.auxiliary_head[0](maps)
        logits = torch.stack([s.seg_logits.data for s in ours.predict(x)])
    assert decode.shape[-2:] == tuple(-(-s // 4) for s in size)  # stride 4 (HF pads to 4)
    assert ref.shape[-2:] == size
    # the classes differ, so a mix-up of classifier rows would show
    assert ref.std(dim=1).min() > 1e-3 and ref_aux.std(dim=1).min() > 1e-3
    diffs = {
        'backbone': max(max_diff(a, b) for a, b in zip(maps, ref_maps, strict=True)),
        'decode': max_diff(decode, ref_decode),
        'aux': max_diff(aux, ref_aux),
        'logits': max_diff(logits, ref),
        'aux resized': max_diff(F.interpolate(aux, size, mode='bilinear'),
                                F.interpolate(ref_aux, size, mode='bilinear')),
    }
    print(f'{name} {size}: max |densevit - HF| ' + ', '.join(f'{k} {v:.1e}'
                                                              for k, v in diffs.items()))
    assert max(diffs.values()) <= TOL, diffs


def test_loss_matches_hf(hf_file, ours):
    """HF's loss (decode + 0.4 x auxiliary cross-entropy on logits resized to the labels,
    averaged over labelled pixels) equals the sum of densevit's."""
    _, hf, _ = hf_file
    x = images(SIZES[1])
    labels = torch.randint(0, hf.config.num_labels, (2, *SIZES[1]),
                           generator=torch.Generator().manual_seed(3))
    labels[0, :10] = 255
    samples = [DataSample(gt_sem_seg=PixelData(data=lab[None]),
                          metainfo=dict(img_shape=SIZES[1])) for lab in labels]
    with torch.no_grad():
        ref = hf(pixel_values=x, labels=labels).loss
        losses = ours.loss(x, samples)
    assert set(losses) == {'decode.loss_ce', 'decode.acc_seg', 'aux_0.loss_ce', 'aux_0.acc_seg'}
    total = losses['decode.loss_ce'] + losses['aux_0.loss_ce']
    print(f'loss {total.item():.6f}, HF {ref.item():.6f}')
    assert total.item() == pytest.approx(ref.item(), abs=TOL)


def test_module_state_dict_converts_alike(hf_file, ours, tmp_path):
    """HF's module state dict (transformers 5 names: ``backbone.swin.encoder``,
    ``attention.q_proj`` ...) converts to the same tensors as the file."""
    _, hf, path = hf_file
    module = tmp_path / 'upernet_module.pth'
    torch.save(hf.state_dict(), module)
    from_file = convert_model(read_checkpoint(path), strict=True)
    from_module = convert_model(read_checkpoint(module), strict=True)
    assert from_module.layout == LAYOUT
    assert from_file.keys() == from_module.keys()
    assert all(torch.equal(from_file[k], from_module[k]) for k in from_file)


def test_converter_command_line(hf_file, ours, tmp_path):
    """``tools/convert/checkpoint.py`` writes the whole model with its origin in the meta; the
    copy loads into the same model and gives the same logits."""
    _, hf, path = hf_file
    out = tmp_path / 'upernet.pth'
    assert load_tool('tools/convert/checkpoint.py').main([str(path), str(out)]) == 0
    saved = torch.load(out, weights_only=True)
    assert saved['meta'] == {'densevit_origin': LAYOUT,
                             'densevit_options': {'always_shift': True}}
    copy = init_model(CONFIG, out, cfg_options=model_options(hf.config))
    x = images(SIZES[0])
    with torch.no_grad():
        assert torch.equal(copy(x, mode='tensor'), ours(x, mode='tensor'))


def test_pool_branch_order_matters(hf_file):
    """The test can fail: with the first and last pyramid pooling branches swapped, the
    logits are off."""
    _, hf, path = hf_file
    model = init_model(CONFIG, path, cfg_options=model_options(hf.config))
    branches = model.decode_head.psp_modules
    first, last = ({k: v.clone() for k, v in branches[i][1].state_dict().items()}
                   for i in (0, -1))
    branches[0][1].load_state_dict(last)
    branches[-1][1].load_state_dict(first)
    x = images(SIZES[0])
    with torch.no_grad():
        diff = max_diff(model(x, mode='tensor'), hf.decode_head(hf.backbone(x).feature_maps))
    assert diff > 1e-2

