"""MMSegmentation SETR checkpoints load into densevit and reproduce mmseg's outputs.

The fixtures (``tools/dev/openmmlab_fixtures/make_setr.py``) are tiny randomised mmseg
SETR-Naive, -PUP and -MLA segmentors built like the ADE20K zoo configs, saved as
mmengine saves them, with mmseg's backbone maps, neck maps, decode and auxiliary
logits on a zero-padded batch of two images, on an image of another size (the
position table resized to a grid it was not made for) and (Naive) on one that is not
whole patches (padded inside the ViT, as mmseg's ``patch_pad='corner'``).
"""
import copy
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.match import load_into
from densevit.checkpoint.read import read_checkpoint
from densevit.models.backbones.vit import VisionTransformer

FIXTURES = Path(__file__).parent / 'fixtures'
CONVERT_TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'convert' / 'checkpoint.py'
ATOL = 1e-4
BN = dict(type='BN', requires_grad=True)
ARCH = dict(embed_dims=32, num_layers=4, num_heads=4, feedforward_channels=32)


def _backbone(with_cls_token, **kwargs):
    return dict(type='VisionTransformer', arch=ARCH, img_size=32, patch_size=8,
                with_cls_token=with_cls_token, out_indices=(0, 1, 2, 3), final_norm=False,
                interpolate_mode='bilinear', pad_to_patch=True, **kwargs)


def _up_head(in_index, num_convs, up_scale, kernel_size):
    return dict(type='SETRUPHead', in_channels=32, channels=8, in_index=in_index,
                num_classes=3, dropout_ratio=0, norm_cfg=BN, num_convs=num_convs,
                up_scale=up_scale, kernel_size=kernel_size, align_corners=False)


# densevit configs of the fixtures' models (as configs/_base_/models/setr_*.py, shrunk)
MODELS = {
    'mmseg_setr_naive': dict(
        type='EncoderDecoder', backbone=_backbone(True), decode_head=_up_head(3, 1, 4, 1),
        auxiliary_head=[_up_head(i, 2, 2, 1) for i in (0, 1, 2)]),
    'mmseg_setr_pup': dict(
        type='EncoderDecoder', backbone=_backbone(True), decode_head=_up_head(3, 4, 2, 3),
        auxiliary_head=[_up_head(i, 2, 2, 3) for i in (0, 1, 2)]),
    'mmseg_setr_mla': dict(
        type='EncoderDecoder', backbone=_backbone(False),
        neck=dict(type='MLANeck', in_channels=[32] * 4, out_channels=8, norm_cfg=BN,
                  act_cfg=dict(type='ReLU')),
        decode_head=dict(type='SETRMLAHead', in_channels=(8,) * 4, in_index=(0, 1, 2, 3),
                         channels=16, mla_channels=4, up_scale=4, num_classes=3,
                         dropout_ratio=0, norm_cfg=BN, align_corners=False),
        auxiliary_head=[dict(type='SETRUPHead', in_channels=8, channels=8, in_index=i,
                             num_classes=3, dropout_ratio=0, norm_layer=None, num_convs=0)
                        for i in (0, 1, 2, 3)]),
}


def _fixture(name):
    path = FIXTURES / f'{name}.pth'
    io = torch.load(FIXTURES / f'{name}_io.pth', weights_only=True)
    return path, io


def _config(name):
    return Config(dict(default_scope='densevit', model=copy.deepcopy(MODELS[name])))


def _outputs(model, x):
    """As the fixture stores mmseg's, but in densevit's level order (MLA: shallow first)."""
    with torch.no_grad():
        feats = model.backbone(x)
        neck = model.neck(feats) if model.neck is not None else feats
        return dict(backbone=list(feats), neck=list(neck) if model.neck is not None else [],
                    decode=model.decode_head(neck),
                    aux=[head(neck) for head in model.auxiliary_head])


def _mmseg_order(name, out):
    """densevit outputs re-ordered as mmseg returns them: MLA levels deepest first."""
    if name != 'mmseg_setr_mla':
        return out
    return dict(out, neck=out['neck'][::-1], aux=out['aux'][::-1])


def _max_diff(ours, ref):
    if torch.is_tensor(ref):
        assert ours.shape == ref.shape
        return (ours - ref).abs().max().item()
    assert len(ours) == len(ref)
    return max([_max_diff(o, r) for o, r in zip(ours, ref, strict=True)], default=0.)


@pytest.mark.parametrize('name', list(MODELS))
def test_whole_model_through_init_model(name, log_lines):
    path, io = _fixture(name)
    model = init_model(_config(name), str(path))  # strict: everything must load
    assert any('MMSegmentation SETR' in m for _, m in log_lines)
    for key in io['outputs']:
        ours = _mmseg_order(name, _outputs(model, io['inputs'][key]))
        ref = io['outputs'][key]
        for part in ('backbone', 'neck', 'decode', 'aux'):
            assert _max_diff(ours[part], ref[part]) <= ATOL, (key, part)
        assert torch.equal(ours['decode'].argmax(1), ref['decode'].argmax(1))


@pytest.mark.parametrize('name', ['mmseg_setr_naive', 'mmseg_setr_mla'])
def test_backbone_through_init_cfg_prefix(name, log_lines):
    path, io = _fixture(name)
    model = VisionTransformer(**{k: v for k, v in MODELS[name]['backbone'].items()
                                 if k != 'type'},
                              init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                            prefix='backbone.'))
    model.init_weights()
    model.eval()
    assert not [m for lvl, m in log_lines if lvl >= logging.WARNING]
    assert torch.equal(model.patch_embed.proj.bias, torch.zeros(32))  # mmseg has none
    for key in io['outputs']:
        with torch.no_grad():
            maps = model(io['inputs'][key])
        assert _max_diff(list(maps), io['outputs'][key]['backbone']) <= ATOL


def test_mla_reversals_are_needed():
    """Without the level reversal the MLA logits differ: the test can fail."""
    path, io = _fixture('mmseg_setr_mla')
    model = init_model(_config('mmseg_setr_mla'), str(path))
    branches = model.decode_head.branches
    branches[0], branches[3] = branches[3], branches[0]
    ours = _outputs(model, io['inputs']['batch'])
    assert _max_diff(ours['decode'], io['outputs']['batch']['decode']) > 1e-2


def test_layout_options_and_dropped_class_row():
    sd = read_checkpoint(FIXTURES / 'mmseg_setr_mla.pth')
    converted = convert_model(sd)
    assert converted.layout == 'MMSegmentation SETR-MLA'
    assert converted.options == {'layer_norm_eps': 1e-6}
    assert converted['backbone.pos_embed.weight'].shape == (1, 17, 32)  # class row kept here
    model = init_model(_config('mmseg_setr_mla'), FIXTURES / 'mmseg_setr_mla.pth')
    torch.testing.assert_close(model.backbone.pos_embed.weight, sd['backbone.pos_embed'][:, 1:])
    assert model.backbone.cls_token is None


def test_setr_file_into_the_wrong_config_names_the_layout():
    """An MLA file with a Naive config: a layout / architecture message, not a resize one."""
    with pytest.raises((ValueError, RuntimeError)) as err:
        init_model(_config('mmseg_setr_naive'), FIXTURES / 'mmseg_setr_mla.pth')
    assert 'resize' not in str(err.value)
    assert 'MMSegmentation SETR-MLA' in str(err.value)


def test_unknown_layout_backbone_gives_a_layout_message(tmp_path):
    """Keys of no known ViT layout: the error names the layouts, not the position table."""
    sd = read_checkpoint(FIXTURES / 'mmseg_setr_mla.pth')
    renamed = {k.replace('backbone.layers.', 'backbone.encoder_layers.'): v
               for k, v in sd.items()}
    path = tmp_path / 'unknown.pth'
    torch.save(renamed, path)
    model = VisionTransformer(**{k: v for k, v in MODELS['mmseg_setr_mla']['backbone'].items()
                                 if k != 'type'},
                              init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                            prefix='backbone.'))
    with pytest.raises(ValueError, match='match no known layout') as err:
        model.init_weights()
    assert 'resize' not in str(err.value)


def test_mmseg_vit_not_taken_for_another_layout():
    from densevit.checkpoint.vit import HF, TIMM
    sd = read_checkpoint(FIXTURES / 'mmseg_setr_pup.pth')
    backbone = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    import re
    for layout in (TIMM, HF):
        assert not any(re.search(layout.signature, k) for k in backbone), layout.name
    whole = convert_model(sd)
    assert whole.layout == 'MMSegmentation SETR (Naive / PUP)'


def test_loading_reports_a_partial_setr_file():
    sd = read_checkpoint(FIXTURES / 'mmseg_setr_naive.pth')
    sd['decode_head.extra_conv.weight'] = torch.zeros(1)
    model = init_model(_config('mmseg_setr_naive'))
    with pytest.raises(ValueError, match=r'SETR \(Naive / PUP\) layout.*decode_head\.extra_conv'):
        load_into(model, convert_model(sd), "partial.pth", strict=True)


def test_sliding_window_logits_match_mmseg():
    """12x12 windows every 9 pixels on a 20x27 image: each window is padded to whole
    patches inside the ViT and its logits resized back to the window, as in mmseg."""
    path, io = _fixture('mmseg_setr_naive')
    model = init_model(_config('mmseg_setr_naive'), str(path))
    model.test_cfg = dict(mode='slide', crop_size=(12, 12), stride=(9, 9))
    x = io['inputs']['odd']
    with torch.no_grad():
        logits = model.inference(x, [dict(img_shape=tuple(x.shape[-2:]))])
    assert _max_diff(logits, io['outputs']['odd']['slide']) <= ATOL


def test_single_auxiliary_head_without_index(tmp_path):
    """An mmseg config with one auxiliary head (a dict): keys ``auxiliary_head.*``."""
    sd = read_checkpoint(FIXTURES / 'mmseg_setr_naive.pth')
    single = {k.replace('auxiliary_head.0.', 'auxiliary_head.'): v for k, v in sd.items()
              if not k.startswith(('auxiliary_head.1.', 'auxiliary_head.2.'))}
    path = tmp_path / 'single_aux.pth'
    torch.save({'state_dict': single}, path)
    cfg = _config('mmseg_setr_naive')
    cfg.model.auxiliary_head = cfg.model.auxiliary_head[:1]
    model = init_model(cfg, str(path))
    io = torch.load(FIXTURES / 'mmseg_setr_naive_io.pth', weights_only=True)
    ours = _outputs(model, io['inputs']['other'])
    assert _max_diff(ours['aux'][0], io['outputs']['other']['aux'][0]) <= ATOL


def _mla_aux_heads_of_the_zoo_config():
    """mmseg's auxiliary heads in the MLA fixture, as its meta's config records them: the
    ADE20K zoo config's four ``FCNHead(num_convs=0)``, head J on MLA output J (J = 0..3)."""
    meta = torch.load(FIXTURES / 'mmseg_setr_mla.pth', weights_only=True)['meta']
    heads = Config.fromstring(meta['cfg'], '.py').model.auxiliary_head
    assert [(h.type, h.in_index, h.num_convs, h.concat_input) for h in heads] == [
        ('FCNHead', j, 0, False) for j in range(4)]
    return heads


@pytest.mark.parametrize('path', ['init_model', 'convert'])
def test_every_mla_auxiliary_head_matches_mmseg(path, tmp_path):
    """Each of the four MLA auxiliary heads (mmseg's head J on MLA output J, deepest first)
    equals mmseg's, head by head, loaded from the mmseg file (``init_model``) and from the
    file ``tools/convert/checkpoint.py`` writes from it (``convert``)."""
    heads = _mla_aux_heads_of_the_zoo_config()
    src, io = _fixture('mmseg_setr_mla')
    if path == 'convert':
        out = tmp_path / 'setr_mla.pth'
        run = subprocess.run([sys.executable, str(CONVERT_TOOL), str(src), str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert 'MMSegmentation SETR-MLA layout' in run.stdout
        src = out
    model = init_model(_config('mmseg_setr_mla'), str(src))
    n = len(heads)
    assert len(model.auxiliary_head) == n
    for key in io['outputs']:
        with torch.no_grad():
            neck = _outputs(model, io['inputs'][key])['neck']
        for j in range(n):
            # mmseg's output J is densevit's level N-1-J, read by densevit's head N-1-J
            ours = model.auxiliary_head[n - 1 - j]
            assert ours.in_index == n - 1 - j
            with torch.no_grad():
                logits = ours(neck)
            ref = io['outputs'][key]['aux'][j]
            assert _max_diff(logits, ref) <= ATOL, (path, key, f'mmseg auxiliary head {j}')
            assert torch.equal(logits.argmax(1), ref.argmax(1)), (path, key, j)
