"""tools/convert/checkpoint.py and tools/convert/mae.py (densevit.checkpoint.cli): read safely,
convert, save the tensors with the origin's layout and options in a meta."""
import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from densevit.models.backbones.mit import MixVisionTransformer
from densevit.models.backbones.swin import SwinTransformer
from densevit.models.backbones.vit import VisionTransformer

TOOLS = Path(__file__).resolve().parents[2] / 'tools' / 'convert'


def _tool(name):
    """Import tools/convert/<name>.py as a module (it imports densevit.checkpoint.cli)."""
    spec = importlib.util.spec_from_file_location(f'convert_tool_{name}', TOOLS / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def saved(path):
    """The tensors of a converter's output (``{'state_dict', 'meta'}``)."""
    return torch.load(path, weights_only=True)['state_dict']


def _swin():
    return SwinTransformer(arch=dict(embed_dims=16, depths=(2, 2), num_heads=(1, 2)),
                           window_size=4, out_indices=(1,))


def test_swin_command_line(tmp_path):
    """A real process: the official layout in, densevit's out, loadable strictly."""
    src = _swin()
    sd = {}
    for k, v in src.state_dict().items():  # densevit -> official names
        k = k.replace('attn.relative_position_bias.', 'attn.')
        sd['norm.' + k[len('norm1.'):] if k.startswith('norm1.') else k] = v
    torch.save({'model': sd}, tmp_path / 'official.pth')
    run = subprocess.run([sys.executable, str(TOOLS / 'checkpoint.py'), str(tmp_path / 'official.pth'),
                          str(tmp_path / 'out.pth')], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    n = len(sd)
    assert re.search(rf'official\.pth: {n} tensors in the official Swin layout -> .*out\.pth: '
                     rf'{n} tensors', run.stdout)
    _swin().load_state_dict(saved(tmp_path / 'out.pth'), strict=True)


def test_unknown_layout_fails_with_the_keys(tmp_path, capsys):
    torch.save({'conv1.weight': torch.zeros(1)}, tmp_path / 'resnet.pth')
    assert _tool('checkpoint').main([str(tmp_path / 'resnet.pth'), str(tmp_path / 'out.pth')]) == 1
    assert 'conv1.weight' in capsys.readouterr().err
    assert not (tmp_path / 'out.pth').exists()


def test_vit_tool_safetensors_and_unmatched(tmp_path):
    pytest.importorskip('safetensors')
    from safetensors.torch import save_file
    vit = VisionTransformer(arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                      feedforward_channels=64), img_size=32, patch_size=8)
    sd = dict(vit.state_dict())
    sd['pos_embed'] = sd.pop('pos_embed.weight')  # timm's name
    sd['reg_token'] = torch.zeros(1, 4, 32)  # no rule for it
    save_file(sd, str(tmp_path / 'timm.safetensors'))
    tool = _tool('checkpoint')
    args = [str(tmp_path / 'timm.safetensors'), str(tmp_path / 'vit.safetensors')]
    assert tool.main(args) == 1  # strict by default
    assert tool.main(args + ['--keep-unmatched']) == 0
    from safetensors.torch import load_file
    out = load_file(str(tmp_path / 'vit.safetensors'))
    assert 'reg_token' in out and 'pos_embed.weight' in out


def test_prefix_takes_one_part_of_a_bigger_file(tmp_path):
    """--prefix: a timm-layout ViT inside a wrapper (``teacher.``) becomes densevit's ViT."""
    vit = VisionTransformer(arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                      feedforward_channels=64), img_size=32, patch_size=8)
    sd = dict(vit.state_dict())
    sd['pos_embed'] = sd.pop('pos_embed.weight')  # timm's name
    torch.save({f'teacher.{k}': v for k, v in sd.items()}, tmp_path / 'in.pth')
    assert _tool('checkpoint').main([str(tmp_path / 'in.pth'), str(tmp_path / 'out.pth'),
                                     '--prefix', 'teacher.']) == 0
    vit.load_state_dict(saved(tmp_path / 'out.pth'), strict=True)


def test_mit_tool(tmp_path):
    mit = MixVisionTransformer(arch=None, embed_dims=[8, 16, 24, 32], num_layers=[1, 1, 1, 1],
                               num_heads=[1, 1, 2, 2])
    official = {}
    for k, v in mit.state_dict().items():  # densevit -> official NVlabs names
        k = re.sub(r'stages\.(\d+)\.patch_embed\.', lambda m: f'patch_embed{int(m[1]) + 1}.', k)
        k = re.sub(r'stages\.(\d+)\.blocks\.', lambda m: f'block{int(m[1]) + 1}.', k)
        k = re.sub(r'stages\.(\d+)\.norm\.', lambda m: f'norm{int(m[1]) + 1}.', k)
        official[k.replace('mlp.dwconv.', 'mlp.dwconv.dwconv.')] = v
    torch.save(official, tmp_path / 'mit_official.pth')
    assert _tool('checkpoint').main([str(tmp_path / 'mit_official.pth'), str(tmp_path / 'out.pth')]) == 0
    mit.load_state_dict(saved(tmp_path / 'out.pth'), strict=True)


def test_unreadable_inputs_fail_with_one_line(tmp_path, capsys):
    """A missing file, a prefix that matches nothing, pickled objects: ``error: ...`` and
    exit status 1, no traceback, nothing written."""
    torch.save({'backbone.conv1.weight': torch.zeros(1)}, tmp_path / 'ok.pth')
    torch.save({'args': argparse.Namespace(lr=0.1)}, tmp_path / 'objects.pth')
    cases = [([str(tmp_path / 'missing.pth')], 'missing.pth'),
             ([str(tmp_path / 'ok.pth'), '--prefix', 'neck.'], 'neck.'),
             ([str(tmp_path / 'objects.pth')], 'objects.pth')]
    for args, named in cases:
        assert _tool('checkpoint').main([args[0], str(tmp_path / 'out.pth'), *args[1:]]) == 1
        err = capsys.readouterr().err
        assert err.startswith('error: ') and named in err and 'Traceback' not in err, err
    assert not (tmp_path / 'out.pth').exists()


def test_mae_tool_writes_the_encoder(tmp_path, capsys):
    """tools/convert/mae.py: a densevit MAE checkpoint (mmengine's ``state_dict`` + ``meta``)
    becomes a ViT state dict, decoder and head left out; a detector is refused."""
    vit = VisionTransformer(arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                      feedforward_channels=64), img_size=32, patch_size=8)
    sd = {f'backbone.{k}': v for k, v in vit.state_dict().items()}
    sd.update({'neck.decoder_embed.weight': torch.zeros(16, 32), 'mask_token': torch.zeros(1)})
    torch.save({'meta': {'iter': 10}, 'state_dict': sd}, tmp_path / 'iter_10.pth')
    tool = _tool('mae')
    assert tool.main([str(tmp_path / 'iter_10.pth'), str(tmp_path / 'vit.pth')]) == 0
    assert f'{len(sd)} tensors in the densevit MAE layout' in capsys.readouterr().out
    vit.load_state_dict(saved(tmp_path / 'vit.pth'), strict=True)
    detector = {k: v for k, v in sd.items() if k.startswith('backbone.')}
    torch.save(dict(detector, **{'bbox_head.fc.bias': torch.zeros(2)}), tmp_path / 'detr.pth')
    assert tool.main([str(tmp_path / 'detr.pth'), str(tmp_path / 'again.pth')]) == 1
    assert 'not an MAE checkpoint' in capsys.readouterr().err
    # checkpoint.py (any known file) does not cut a densevit detector down to its backbone
    assert _tool('checkpoint').main([str(tmp_path / 'detr.pth'), str(tmp_path / 'again.pth')]) == 1
    assert "a densevit detector / segmentor's own: it needs no conversion" in \
        capsys.readouterr().err
    assert not (tmp_path / 'again.pth').exists()
