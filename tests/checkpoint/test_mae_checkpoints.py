"""MAE checkpoints into densevit's ViT (fine-tuning from MAE).

- Hugging Face ``ViTMAEModel`` / ``ViTMAEForPreTraining``: every tensor random, mask ratio 0,
  the patches unshuffled by HF's own ``ids_restore``: densevit's ViT equals HF's encoder.
- official MAE (facebookresearch/mae ``models_mae.py`` names; its encoder is timm's ViT): the
  same random HF weights written in the official layout, compared with HF run with the
  official LayerNorm eps (1e-6), i.e. the computation of MAE's ``forward_encoder``.
- densevit's own MAE checkpoints (``backbone.*`` + decoder / head / mask token): the
  encoder loads, the rest is dropped with a logged count; a whole detector's backbone too.
- a checkpoint of another width or depth: one error naming both.
- the fine-tuning configs (configs/mae/finetune/) load an MAE checkpoint through their
  ``init_cfg`` and decay learning rates layer by layer.
"""
import logging
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.vit import convert_mae, convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.registry import MODELS
from densevit.utils.random_init import randomize_

FINETUNE = Path(__file__).resolve().parents[2] / 'configs' / 'mae' / 'finetune'
TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
HF_DECODER_KEYS = 24  # ViTMAEForPreTraining's decoder: 1 layer (16 tensors) + 8 others


def _vit(checkpoint=None, arch=TINY, **kwargs):
    init_cfg = checkpoint and dict(type='Pretrained', checkpoint=str(checkpoint))
    return VisionTransformer(arch=arch, img_size=32, patch_size=8, init_cfg=init_cfg, **kwargs)


def _loaded(checkpoint, **kwargs):
    vit = _vit(checkpoint, **kwargs)
    vit.init_weights()
    return vit.eval()


def _hf_mae(layer_norm_eps):
    """A random ``ViTMAEForPreTraining`` (hidden 32, 2 layers, 32-pixel images, patches of 8)
    that keeps every patch (mask ratio 0)."""
    transformers = pytest.importorskip('transformers')
    cfg = transformers.ViTMAEConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, decoder_hidden_size=16, decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2, decoder_intermediate_size=32, mask_ratio=0.0,
        layer_norm_eps=layer_norm_eps, hidden_dropout_prob=0., attention_probs_dropout_prob=0.)
    # every tensor random: the stored sin-cos position table too, so a swap would show
    return randomize_(transformers.ViTMAEForPreTraining(cfg)).eval()


@pytest.fixture(scope='module')
def hf_mae():
    return _hf_mae(1e-12)  # HF's default eps, set on densevit's ViT by the layout's options


@pytest.fixture(scope='module')
def official_mae():
    return _hf_mae(1e-6)  # models_mae.py: norm_layer=partial(nn.LayerNorm, eps=1e-6)


def _hf_map(vit_mae, x, noise):
    """HF's encoder output as densevit's map [B, D, h, w]: with mask ratio 0 every patch is
    kept, in the order of ``argsort(noise)``; HF's ``ids_restore`` puts them back."""
    with torch.no_grad():
        out = vit_mae(pixel_values=x, noise=noise)
    tokens = out.last_hidden_state[:, 1:]  # drop the class token
    B, N, D = tokens.shape
    tokens = tokens.gather(1, out.ids_restore[..., None].expand(B, N, D))
    return tokens.transpose(1, 2).reshape(B, D, x.shape[-2] // 8, x.shape[-1] // 8)


def _assert_same_outputs(vit, hf_encoder):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        (ours,) = vit(x)
    noise = torch.rand(2, 16, generator=torch.Generator().manual_seed(2))  # shuffled order
    torch.testing.assert_close(ours, _hf_map(hf_encoder, x, noise), atol=1e-4, rtol=0)
    identity = torch.arange(16.).expand(2, 16)  # the grid order itself
    torch.testing.assert_close(ours, _hf_map(hf_encoder, x, identity), atol=1e-4, rtol=0)


def _dropped(log_lines):
    """{reason: count} of the converter's 'dropped N key(s)' INFO lines."""
    found = {}
    for level, m in log_lines:
        hit = re.search(r'dropped (\d+) key\(s\) .*: (.*)$', m)
        if hit and level == logging.INFO:
            found[hit[2]] = int(hit[1])
    return found


def _no_warnings(log_lines):
    return not [m for level, m in log_lines if level >= logging.WARNING]


# ---------------------------------------------------------------- Hugging Face ViTMAE

@pytest.mark.parametrize('source', ['ViTMAEForPreTraining file', 'ViTMAEForPreTraining state dict',
                                    'ViTMAEModel state dict'])
def test_hf_vit_mae_outputs_match(hf_mae, tmp_path, source, log_lines):
    path = tmp_path / 'vit_mae.pth'
    if source == 'ViTMAEModel state dict':  # transformers-5 module names, no decoder
        torch.save(hf_mae.vit.state_dict(), path)
    elif source == 'ViTMAEForPreTraining state dict':  # module names: vit.layers.N.*
        torch.save(hf_mae.state_dict(), path)
    else:  # the file from_pretrained reads: Hub names, vit.* encoder, decoder.*
        hf_mae.save_pretrained(tmp_path)
        path = tmp_path / 'model.safetensors'
    vit = _loaded(path, layer_norm_eps=1e-12)  # HF's eps, in the config
    _assert_same_outputs(vit, hf_mae.vit)
    assert _no_warnings(log_lines)
    if source.startswith('ViTMAEForPreTraining'):
        assert any('Hugging Face ViTMAE layout' in m for _, m in log_lines)
        assert _dropped(log_lines) == {
            'MAE decoder (pre-training only, not part of the encoder)': HF_DECODER_KEYS}


# ---------------------------------------------------------------- official MAE

def _official_state_dict(hf_mae):
    """The HF model's weights under facebookresearch/mae's names (``models_mae.py``: timm's
    ``PatchEmbed`` and ``Block`` for encoder and decoder), written here from those names."""
    sd = hf_mae.state_dict()
    out = {'cls_token': sd['vit.embeddings.cls_token'],
           'pos_embed': sd['vit.embeddings.position_embeddings'],
           'norm.weight': sd['vit.layernorm.weight'], 'norm.bias': sd['vit.layernorm.bias']}
    for p in ('weight', 'bias'):
        out[f'patch_embed.proj.{p}'] = sd[f'vit.embeddings.patch_embeddings.projection.{p}']

    def blocks(src, dst, depth):
        parts = (('attention.o_proj', 'attn.proj'), ('layernorm_before', 'norm1'),
                 ('layernorm_after', 'norm2'), ('mlp.fc1', 'mlp.fc1'), ('mlp.fc2', 'mlp.fc2'))
        for i in range(depth):
            for p in ('weight', 'bias'):
                out[f'{dst}.{i}.attn.qkv.{p}'] = torch.cat(
                    [sd[f'{src}.{i}.attention.{x}_proj.{p}'] for x in 'qkv'])
                for a, b in parts:
                    out[f'{dst}.{i}.{b}.{p}'] = sd[f'{src}.{i}.{a}.{p}']

    blocks('vit.layers', 'blocks', 2)
    blocks('decoder.decoder_layers', 'decoder_blocks', 1)
    for k, v in sd.items():  # mask_token, decoder_embed / _pos_embed / _norm / _pred
        if k.startswith('decoder.') and not k.startswith('decoder.decoder_layers.'):
            out[k[len('decoder.'):]] = v
    return out


def test_official_mae_outputs_match(official_mae, tmp_path, log_lines):
    sd = _official_state_dict(official_mae)
    decoder = [k for k in sd if k.startswith('decoder_') or k == 'mask_token']
    assert len(decoder) == 1 + 1 + 2 + 2 + 2 + 12  # token, pos table, embed, norm, pred, block
    torch.save({'model': sd}, tmp_path / 'mae_pretrain.pth')  # as the official scripts save
    vit = _loaded(tmp_path / 'mae_pretrain.pth')
    assert {m.eps for m in vit.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-6}
    _assert_same_outputs(vit, official_mae.vit)
    assert _no_warnings(log_lines)
    assert any('official MAE layout' in m for _, m in log_lines)
    assert _dropped(log_lines) == {
        'MAE decoder (pre-training only, not part of the encoder)': len(decoder)}


# ---------------------------------------------------------------- densevit's own

def _extras():
    """What a densevit MAE checkpoint has beside its encoder: decoder, head, mask token."""
    g = torch.Generator().manual_seed(3)
    return {'neck.decoder_embed.weight': torch.randn(16, 32, generator=g),
            'neck.mask_token': torch.randn(1, 1, 16, generator=g),
            'neck.blocks.0.norm1.weight': torch.randn(16, generator=g),
            'neck.decoder_pred.weight': torch.randn(192, 16, generator=g),
            'head.pred.bias': torch.randn(192, generator=g),
            'mask_token': torch.randn(1, 1, 32, generator=g)}


def _densevit_checkpoint(path, backbone, extras):
    """A checkpoint as densevit's Runner saves it: ``meta`` + ``state_dict`` (+ other state)."""
    sd = {f'backbone.{k}': v for k, v in backbone.state_dict().items()}
    torch.save({'meta': {'mmengine_version': '0.10.7', 'iter': 10},
                'state_dict': {**sd, **extras}, 'message_hub': {}}, path)
    return path


@pytest.fixture
def densevit_mae(tmp_path):
    """(file, the ViT in it) of a densevit MAE checkpoint."""
    src = randomize_(_vit()).eval()
    return _densevit_checkpoint(tmp_path / 'iter_10.pth', src, _extras()), src


def test_densevit_mae_loads_its_encoder_and_drops_the_rest(densevit_mae, log_lines):
    path, src = densevit_mae
    vit = _loaded(path)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(vit(x)[0], src(x)[0], atol=0, rtol=0)
    assert _no_warnings(log_lines)
    assert any(f'loaded {len(src.state_dict())}/{len(src.state_dict())} tensors' in m
               and 'densevit MAE layout' in m for _, m in log_lines)
    assert _dropped(log_lines) == {
        'MAE decoder / pre-training head (not part of the encoder)': len(_extras())}
    # the encoder alone, asked for by prefix: the same weights
    out = _vit()
    out.init_cfg = dict(type='Pretrained', checkpoint=str(path), prefix='backbone.')
    out.init_weights()
    for k, v in src.state_dict().items():
        torch.testing.assert_close(out.state_dict()[k], v, atol=0, rtol=0)


def test_a_whole_detector_gives_its_backbone(tmp_path, log_lines):
    """A densevit detector / segmentor checkpoint (backbone + neck + heads): the ViT takes
    the backbone; neck and heads are dropped with their count (another kind of model than
    MAE, named so in the log)."""
    src = randomize_(_vit())
    extras = {'neck.convs.0.weight': torch.zeros(8, 32, 1, 1),
              'bbox_head.class_embed.weight': torch.zeros(4, 8),
              'bbox_head.class_embed.bias': torch.zeros(4)}
    vit = _loaded(_densevit_checkpoint(tmp_path / 'detr.pth', src, extras))
    torch.testing.assert_close(vit.blocks[1].mlp.fc2.weight, src.blocks[1].mlp.fc2.weight)
    assert _no_warnings(log_lines)
    assert _dropped(log_lines) == {
        'neck and heads of a whole model (not part of the backbone)': 3}
    assert any('densevit detector / segmentor (its backbone) layout' in m for _, m in log_lines)


def test_convert_mae_refuses_other_checkpoints():
    """tools/convert/mae.py's converter: MAE layouts only (an official file holding the
    encoder alone is timm's layout); a whole detector is refused, naming its layout."""
    sd = dict(_vit().state_dict())
    timm = dict(sd)
    timm['pos_embed'] = timm.pop('pos_embed.weight')  # the encoder alone, timm's names
    assert convert_mae(timm).layout == 'timm ViT'
    assert convert_vit(sd).layout == 'densevit ViT'  # its table in a module: not timm's file
    detector = {**{f'backbone.{k}': v for k, v in sd.items()}, 'bbox_head.fc.bias': torch.ones(2)}
    with pytest.raises(ValueError, match=r'not an MAE checkpoint.*densevit detector'):
        convert_mae(detector)
    assert convert_vit(detector).layout == 'densevit detector / segmentor (its backbone)'


# ---------------------------------------------------------------- bad input

@pytest.fixture
def mae_files(tmp_path, densevit_mae, hf_mae):
    """The three kinds of MAE file, each of a 2-layer ViT of width 32."""
    hf_mae.save_pretrained(tmp_path / 'hf')
    torch.save({'model': _official_state_dict(hf_mae)}, tmp_path / 'official.pth')
    return {'densevit MAE': densevit_mae[0], 'official MAE': tmp_path / 'official.pth',
            'Hugging Face ViTMAE': tmp_path / 'hf' / 'model.safetensors'}


def test_another_width_or_depth_is_one_error_naming_both(mae_files):
    narrow = dict(TINY, embed_dims=16, feedforward_channels=32)
    for layout, path in mae_files.items():
        with pytest.raises(CheckpointMismatchError) as err:
            _loaded(path, arch=narrow)
        msg = str(err.value)
        assert f'it is a {layout} checkpoint of width 32, the model\'s ViT has width 16' in msg
        assert str(path) in msg and '\n' not in msg
        with pytest.raises(CheckpointMismatchError, match=rf'a {layout} checkpoint with 2 '
                                                          r"layers, the model's ViT has 3"):
            _loaded(path, arch=dict(TINY, num_layers=3))


def test_train_tool_reports_another_width_in_one_line(tmp_path, capsys):
    """tools/train.py on the tiny DETR (a ViT of width 32) given a width-16 MAE checkpoint:
    exit status 1 and one line naming both widths, no size-mismatch trace."""
    from tiny_run import isolated, load_tool, unique_names, write_config
    narrow = _vit(arch=dict(TINY, embed_dims=16, feedforward_channels=32, num_layers=1))
    path = _densevit_checkpoint(tmp_path / 'mae16.pth', narrow, _extras())
    options = ['model.backbone.init_cfg.type=Pretrained',
               f'model.backbone.init_cfg.checkpoint={path}', *unique_names()]
    with isolated():
        rc = load_tool('tools/train.py').main([write_config(tmp_path), '--work-dir',
                                               str(tmp_path / 'w'), '--cfg-options', *options])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, lines
    assert "densevit MAE checkpoint of width 16, the model's ViT has width 32" in lines[0]


# ---------------------------------------------------------------- fine-tuning configs

@pytest.mark.parametrize('name', sorted(p.name for p in FINETUNE.glob('*.py')))
def test_finetune_config_loads_an_mae_encoder_with_layer_decay(name, tmp_path, log_lines):
    cfg = Config.fromfile(str(FINETUNE / name))
    backbone = dict(cfg.model.backbone)
    # the last checkpoint the 10,000-iteration MAE pre-training writes (its work dir is named
    # after its config)
    pretrain = Config.fromfile(str(FINETUNE.parent / 'mae_vit_shapes_10k.py'))
    assert backbone['init_cfg'] == dict(
        type='Pretrained',
        checkpoint=f'work_dirs/mae_vit_shapes_10k/iter_{pretrain.train_cfg.max_iters}.pth')
    # an MAE checkpoint of this ViT, with a class token (MAE's ViT-B has one; the MAE
    # quickstart's, like these, none): token and position row are dropped on load
    pre = dict(backbone, init_cfg=None, with_cls_token=True)
    with DefaultScope.overwrite_default_scope('densevit'):
        src = randomize_(MODELS.build(pre))
    path = _densevit_checkpoint(tmp_path / 'mae.pth', src, _extras())
    cfg.model.backbone.init_cfg.checkpoint = str(path)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model)
        model.init_weights()
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    ours = model.backbone.state_dict()
    for k, v in src.state_dict().items():
        if k != 'cls_token':  # no class token in the fine-tuned ViT: token and row dropped
            torch.testing.assert_close(ours[k], v[:, 1:] if k == 'pos_embed.weight' else v,
                                       atol=0, rtol=0)
    assert _no_warnings(log_lines)

    rate, L = cfg.optim_wrapper.paramwise_cfg.layer_decay_rate, len(model.backbone.blocks)
    assert 0.65 <= rate <= 1.0
    base = cfg.optim_wrapper.optimizer.lr
    lrs = {n: g['lr'] for g in optim.optimizer.param_groups for n in g['param_names']}
    assert lrs['backbone.patch_embed.proj.weight'] == pytest.approx(base * rate ** (L + 1))
    assert lrs['backbone.blocks.0.attn.qkv.weight'] == pytest.approx(base * rate ** L)
    custom = cfg.optim_wrapper.paramwise_cfg.get('custom_keys', {})
    head = next(n for n in lrs if n.startswith(('bbox_head.', 'decode_head.'))
                and not any(k in n for k in custom))
    assert lrs[head] == pytest.approx(base)
    for key, mult in custom.items():
        hits = [n for n in lrs if key in n and n.startswith('bbox_head.')]
        assert all(lrs[n] == pytest.approx(base * mult.get('lr_mult', 1.)) for n in hits)


@pytest.mark.parametrize('pretrain', ['mae_vit_shapes_quickstart.py', 'mpp_vit_shapes_quickstart.py'])
def test_real_pretraining_model_into_the_detection_finetune_config(pretrain, tmp_path,
                                                                   log_lines):
    """End to end on the real models: the MAE / MPP quickstart model's own state dict, saved
    as the Runner saves it, initialises the detection fine-tuning config's ViT exactly, and
    everything that is not the encoder (decoder, head, mask embedding) is dropped, counted."""
    from tiny_run import built_from_checkpoint, save_pretraining_model
    path = tmp_path / 'iter_1000.pth'
    sd = save_pretraining_model(Config.fromfile(str(FINETUNE.parent / pretrain)).model, path, 1000)
    cfg = Config.fromfile(str(FINETUNE / 'deformable_detr_vit_shapes_mae.py'))
    model = built_from_checkpoint(cfg.model, path)
    ours = model.backbone.state_dict()
    encoder = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    assert set(ours) == set(encoder)
    for k, v in encoder.items():
        torch.testing.assert_close(ours[k], v, atol=0, rtol=0)
    assert sum(_dropped(log_lines).values()) == len(sd) - len(encoder) > 0
    assert _no_warnings(log_lines)
