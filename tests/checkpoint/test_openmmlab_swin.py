"""MMSegmentation Swin checkpoints load into densevit's SwinTransformer and give mmseg's maps.

Fixtures (tools/dev/openmmlab_fixtures/make_upernet.py, make_swin.py, MMSegmentation 1.2.2):

- ``mmseg_upernet_swin.pth``: a randomised tiny UPerNet + Swin saved as mmengine saves it;
  its backbone is read with ``init_cfg=dict(type='Pretrained', prefix='backbone.')``.
- ``mmseg_swin_imagenet.pth``: an ImageNet file as mmseg publishes them (official names
  put through mmseg's swin2mmseg.py); the reference is mmseg's Swin loading it itself.

``*_io.pth`` hold the inputs (a padded batch of two sizes; 29x29 and 56x56 images: maps
smaller than and equal to the 7x7 window) and mmseg's backbone maps on them (the UperNet
file's also its heads' outputs: tests/checkpoint/test_openmmlab_upernet.py, fixture made by
make_upernet.py).
"""
import logging
from pathlib import Path

import pytest
import torch

from densevit.checkpoint import swin as swin_ckpt
from densevit.checkpoint.mit import convert_mit
from densevit.checkpoint.pretrained import load_pretrained
from densevit.checkpoint.read import read_checkpoint, select_prefix
from densevit.checkpoint.swin import convert_swin
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.swin import SwinTransformer

FIXTURES = Path(__file__).parent / 'fixtures'
TOL = 1e-4
# the fixture models' architectures (make_swin.py)
ARCHS = {
    'mmseg_upernet_swin': dict(arch=dict(embed_dims=16, depths=(2, 2), num_heads=(1, 2)),
                               mlp_ratio=2, prefix='backbone.'),
    'mmseg_swin_imagenet': dict(arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)),
                                mlp_ratio=4, prefix=None),
}


def _model(name, **kwargs):
    cfg = dict(ARCHS[name])
    prefix = cfg.pop('prefix')
    init_cfg = dict(type='Pretrained', checkpoint=str(FIXTURES / f'{name}.pth'))
    if prefix:
        init_cfg['prefix'] = prefix
    cfg.update(window_size=7, out_indices=(0, 1), drop_path_rate=0., init_cfg=init_cfg)
    cfg.update(kwargs)
    return SwinTransformer(**cfg)


def _max_diff(model, io):
    diffs = {}
    with torch.no_grad():
        for key, refs in io['outputs'].items():
            if isinstance(refs, dict):  # the UperNet file's outputs: the heads' too
                refs = refs['backbone']
            outs = model(io['inputs'][key])
            assert len(outs) == len(refs)
            for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
                assert o.shape == r.shape, (key, i)
                diffs[f'{key}/{i}'] = (o - r).abs().max().item()
    return diffs


@pytest.mark.parametrize('name', list(ARCHS))
def test_backbone_maps_match_mmseg(name, log_lines):
    """init_cfg Pretrained (the public path) -> the same maps as mmseg's own model."""
    model = _model(name)
    model.init_weights()
    model.eval()
    assert model.always_shift  # mmseg shifts every second block whatever the map size
    warnings = [m for lvl, m in log_lines if lvl >= logging.WARNING]
    assert not warnings, warnings
    text = '\n'.join(m for _, m in log_lines)
    assert 'MMSegmentation Swin layout' in text
    if name == 'mmseg_swin_imagenet':  # no output norms in an ImageNet file: identity, as mmseg
        assert "dropped 2 key(s) ['norm.weight', 'norm.bias']" in text
        assert any('norm0.weight' in m and 'expected' in m for _, m in log_lines)
    io = torch.load(FIXTURES / f'{name}_io.pth', weights_only=True)
    diffs = _max_diff(model, io)
    assert max(diffs.values()) <= TOL, diffs


def test_whole_model_backbone_loads_strictly():
    report = load_pretrained(_model('mmseg_upernet_swin', init_cfg=None),
                             str(FIXTURES / 'mmseg_upernet_swin.pth'), convert=convert_swin,
                             prefix='backbone.', strict=True)
    assert not report.missing and not report.unexpected and not report.mismatched
    sd = select_prefix(read_checkpoint(FIXTURES / 'mmseg_upernet_swin.pth'), 'backbone.')
    converted = convert_swin(sd, strict=True)
    assert converted.layout == 'MMSegmentation Swin'
    assert converted.options == {'always_shift': True}


def test_imagenet_file_converts_strictly():
    converted = convert_swin(read_checkpoint(FIXTURES / 'mmseg_swin_imagenet.pth'), strict=True)
    assert converted.layout == 'MMSegmentation Swin'
    assert not any(k.startswith(('norm.', 'head')) or 'attn_mask' in k for k in converted)


def test_unfold_order_is_what_makes_the_maps_match(monkeypatch):
    """Without the patch-merging re-indexing the second stage is far off (the test can fail)."""
    monkeypatch.setattr(swin_ckpt.MMSEG, 'post', None)
    model = _model('mmseg_upernet_swin')
    model.init_weights()
    io = torch.load(FIXTURES / 'mmseg_upernet_swin_io.pth', weights_only=True)
    diffs = _max_diff(model.eval(), io)
    assert max(d for k, d in diffs.items() if k.endswith('/0')) <= TOL
    assert min(d for k, d in diffs.items() if k.endswith('/1')) > 0.05


def test_config_always_shift_wins_and_matters(log_lines):
    """An explicit always_shift=False is kept (one line names mmseg's True); mmseg's maps then differ where a
    stage's map is no larger than the 7x7 window (second stages: 5x7, 7x7, 4x4) and
    nowhere else (first stages: 10x13, 14x14, 8x8)."""
    model = _model('mmseg_upernet_swin', always_shift=False)
    model.init_weights()
    assert not model.always_shift
    assert any('this model keeps always_shift=False from its config' in m for _, m in log_lines)
    io = torch.load(FIXTURES / 'mmseg_upernet_swin_io.pth', weights_only=True)
    diffs = _max_diff(model.eval(), io)
    assert max(d for k, d in diffs.items() if k.endswith('/0')) <= TOL
    assert min(d for k, d in diffs.items() if k.endswith('/1')) > 0.01


@pytest.mark.parametrize('name', list(ARCHS))
def test_mmseg_swin_is_no_other_layout(name):
    """mmseg Swin keys are never taken for another family's layout (ViT, MiT)."""
    sd = read_checkpoint(FIXTURES / f'{name}.pth')
    sd = select_prefix(sd, ARCHS[name]['prefix']) if ARCHS[name]['prefix'] else sd
    with pytest.raises(ValueError, match='match no known layout'):
        convert_vit(sd, strict=True)
    with pytest.raises(ValueError, match='match no known layout'):
        convert_mit(sd)


def test_other_swin_layouts_are_not_mmseg():
    model = _model('mmseg_upernet_swin', init_cfg=None)
    ours = convert_swin(model.state_dict(), strict=True)
    assert ours.layout == 'densevit Swin' and ours.options == {}
    official = {k.replace('attn.relative_position_bias.', 'attn.'): v
                for k, v in model.state_dict().items() if not k.startswith('norm0')}
    official['norm.weight'], official['norm.bias'] = official.pop('norm1.weight'), \
        official.pop('norm1.bias')
    converted = convert_swin(official, strict=True)
    assert converted.layout == 'official Swin' and converted.options == {'always_shift': False}


def test_whole_model_file_without_prefix_says_how():
    model = _model('mmseg_upernet_swin', init_cfg=dict(
        type='Pretrained', checkpoint=str(FIXTURES / 'mmseg_upernet_swin.pth')))
    with pytest.raises(ValueError, match=r"prefix='backbone\.'"):
        model.init_weights()


def test_an_mmseg_swin_under_backbone_prefix_converts(tmp_path, log_lines):
    """A file holding an mmseg Swin under ``backbone.`` beside heads densevit does not have
    (here an mmpretrain-style classifier: the UperNet file's backbone and a ``head.fc``):
    the converter takes the backbone (it used to refuse: "the keys match no known
    whole-model or backbone layout"). The UperNet file itself converts whole
    (tests/checkpoint/test_openmmlab_upernet.py)."""
    from tiny_run import load_tool
    sd = select_prefix(read_checkpoint(FIXTURES / 'mmseg_upernet_swin.pth'), 'backbone.')
    classifier = {f'backbone.{k}': v for k, v in sd.items()}
    classifier.update({'head.fc.weight': torch.zeros(3, 32), 'head.fc.bias': torch.zeros(3)})
    src, out = tmp_path / 'classifier.pth', tmp_path / 'swin.pth'
    torch.save({'state_dict': classifier}, src)
    assert load_tool('tools/convert/checkpoint.py').main([str(src), str(out)]) == 0
    assert any("converted the backbone under 'backbone.'" in m and 'head.fc.weight' in m
               for _, m in log_lines)
    saved = torch.load(out, weights_only=True)
    assert saved['meta'] == {'densevit_origin': 'MMSegmentation Swin',
                             'densevit_options': {'always_shift': True}}
    model = _model('mmseg_upernet_swin', init_cfg=None)
    missing, unexpected = model.load_state_dict(saved['state_dict'], strict=False)
    assert not unexpected and all(k.startswith('norm0.') for k in missing)  # mmseg: no norm0
