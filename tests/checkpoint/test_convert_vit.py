"""ViT checkpoint conversion: HF ViTModel outputs reproduced; timm variants; loud loading."""
import argparse
import logging

import pytest
import torch

from densevit.checkpoint.match import load_into
from densevit.checkpoint.pretrained import load_pretrained
from densevit.checkpoint.read import read_checkpoint
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.random_init import randomize_

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)


def _ours(img_size=32, **kwargs):
    return VisionTransformer(arch=TINY, img_size=img_size, patch_size=8, **kwargs).eval()


@pytest.fixture(scope='module')
def hf_vit(tmp_path_factory):
    transformers = pytest.importorskip('transformers')
    # HF's own LayerNorm eps (1e-12), which densevit's ViT is built with for these tests;
    # every tensor random (biases, norms, position table, class token)
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, image_size=32, patch_size=8,
                                 layer_norm_eps=1e-12, hidden_dropout_prob=0.,
                                 attention_probs_dropout_prob=0.)
    model = randomize_(transformers.ViTModel(cfg, add_pooling_layer=False)).eval()
    path = tmp_path_factory.mktemp('hf_vit')
    model.save_pretrained(path)  # Hub file layout (encoder.layer.N.attention.attention.query)
    return model, path / 'model.safetensors'


def _hf_map(hf, x, **kwargs):
    """HF last hidden state (after its final layernorm), patch tokens as [B, D, h, w]."""
    with torch.no_grad():
        tokens = hf(pixel_values=x, **kwargs).last_hidden_state[:, 1:]
    h, w = x.shape[-2] // 8, x.shape[-1] // 8
    return tokens.transpose(1, 2).reshape(x.shape[0], -1, h, w)


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_vit_outputs_match(hf_vit, source):
    hf, path = hf_vit
    # the Hub file (what from_pretrained downloads) and transformers-5's own module names
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    ours = _ours(layer_norm_eps=1e-12)  # HF's eps, set in the config: a file never changes it
    converted = convert_vit(sd, strict=True)
    assert converted.options == {'layer_norm_eps': 1e-12}  # the origin's, recorded
    load_into(ours, converted, source, strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        (out,) = ours(x)
    torch.testing.assert_close(out, _hf_map(hf, x), atol=1e-4, rtol=0)

    # another input size: both resize the position table the same way (bicubic)
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        (out,) = ours(x)
    ref = _hf_map(hf, x, interpolate_pos_encoding=True)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)


def test_hf_vit_other_img_size_resizes_the_table_once_with_pos_grid(hf_vit):
    """A ViT built for 48-pixel images from a 32-pixel (4x4) checkpoint, run at 48x64:
    with ``pos_grid`` = the checkpoint's grid the table goes 4x4 -> 6x8 in one step, as
    HF's ``interpolate_pos_encoding``; without it, 4x4 -> 6x6 on load, then -> 6x8."""
    hf, path = hf_vit
    x = torch.randn(1, 3, 48, 64)
    ref = _hf_map(hf, x, interpolate_pos_encoding=True)
    outs = {}
    for pos_grid in ((4, 4), None):
        ours = _ours(img_size=48, pos_grid=pos_grid)
        load_pretrained(ours, path, convert=convert_vit)
        with torch.no_grad():
            (outs[pos_grid],) = ours(x)
    torch.testing.assert_close(outs[(4, 4)], ref, atol=1e-4, rtol=0)
    assert (outs[None] - ref).abs().max() > 1e-3  # two resizes are not one
    # 'checkpoint': the grid read from the Pretrained file itself
    ours = _ours(img_size=48, pos_grid='checkpoint',
                 init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    assert ours.pos_embed.weight.shape[1] == 1 + 4 * 4
    ours.init_weights()
    with torch.no_grad():
        (out,) = ours(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="pos_grid='checkpoint' needs init_cfg"):
        _ours(pos_grid='checkpoint')


@pytest.mark.parametrize('eps', [1e-5, 1e-6])  # given, and the default
def test_the_config_eps_wins_over_the_checkpoint_with_one_line(hf_vit, log_lines, eps):
    """A file never changes the model; the origin's other eps is named with the config's."""
    _, path = hf_vit
    ours = _ours(layer_norm_eps=eps) if eps != 1e-6 else _ours()
    load_pretrained(ours, path, convert=convert_vit)
    assert {m.eps for m in ours.modules() if isinstance(m, torch.nn.LayerNorm)} == {eps}
    (line,) = [m for lvl, m in log_lines if 'was built with' in m and lvl == logging.WARNING]
    assert ('its origin (Hugging Face ViT) was built with layer_norm_eps=1e-12; this model keeps '
            f'layer_norm_eps={eps} from its config') in line


def _timm_state_dict(model):
    """densevit's ViT weights in timm's layout (bare ``pos_embed``, a classifier head)."""
    sd = dict(model.state_dict())
    sd['pos_embed'] = sd.pop('pos_embed.weight')
    sd['head.weight'], sd['head.bias'] = torch.randn(10, 32), torch.randn(10)
    return sd


def test_timm_layout_other_grid_loads_resized(tmp_path, log_lines):
    src = randomize_(_ours(img_size=48))  # 6x6 grid
    path = tmp_path / 'timm_vit.pth'
    torch.save(_timm_state_dict(src), path)

    dst = _ours(img_size=32)  # 4x4 grid
    report = load_pretrained(dst, path, convert=convert_vit)
    assert not (report.missing or report.unexpected or report.mismatched)
    torch.testing.assert_close(dst.pos_embed.weight, src.pos_embed.table((4, 4)))
    torch.testing.assert_close(dst.blocks[1].attn.qkv.weight, src.blocks[1].attn.qkv.weight)
    assert any('Resizing pos_embed.weight from 6x6 to 4x4' in m for _, m in log_lines)
    assert any('dropped 2 key(s)' in m and 'classification head' in m for _, m in log_lines)


def test_init_cfg_pretrained_converts_hf_layout(hf_vit, log_lines):
    """``init_cfg=dict(type='Pretrained')`` on the ViT goes through load_pretrained."""
    hf, path = hf_vit
    model = _ours(layer_norm_eps=1e-12, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    model.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        (out,) = model(x)
    torch.testing.assert_close(out, _hf_map(hf, x), atol=1e-4, rtol=0)
    assert not [m for lvl, m in log_lines if lvl >= logging.WARNING]


def test_deit_distillation_token_dropped_with_its_position_row():
    src = randomize_(_ours())
    sd = _timm_state_dict(src)
    table = sd['pos_embed']  # [1, 1 + 16, 32] -> DeiT's [1, 2 + 16, 32]: cls, dist, grid
    sd['pos_embed'] = torch.cat([table[:, :1], torch.randn(1, 1, 32), table[:, 1:]], dim=1)
    sd['dist_token'] = torch.randn(1, 1, 32)
    sd['head_dist.weight'], sd['head_dist.bias'] = torch.randn(10, 32), torch.randn(10)
    out = convert_vit(sd, strict=True)
    assert 'dist_token' not in out and not any(k.startswith('head') for k in out)
    torch.testing.assert_close(out['pos_embed.weight'], table)
    _ours().load_state_dict(out, strict=True)


def test_mae_checkpoints():
    src = _ours()
    sd = _timm_state_dict(src)
    # MAE pre-training file: the encoder plus its decoder
    pretrain = dict(sd, mask_token=torch.zeros(1, 1, 16), **{
        'decoder_embed.weight': torch.zeros(16, 32), 'decoder_pos_embed': torch.zeros(1, 17, 16),
        'decoder_blocks.0.attn.qkv.weight': torch.zeros(48, 16),
        'decoder_norm.weight': torch.ones(16),
        'decoder_pred.weight': torch.zeros(192, 16)})
    _ours().load_state_dict(convert_vit(pretrain, strict=True), strict=True)
    # MAE fine-tuned (global pool): fc_norm instead of norm -> a backbone without final norm
    finetuned = {k: v for k, v in sd.items() if not k.startswith('norm.')}
    finetuned.update({'fc_norm.weight': torch.ones(32), 'fc_norm.bias': torch.zeros(32)})
    out = convert_vit(finetuned, strict=True)
    assert not any(k.startswith(('fc_norm', 'norm.')) for k in out)
    _ours(final_norm=False).load_state_dict(out, strict=True)


def test_unknown_layout_is_an_error_listing_keys():
    sd = {'conv1.weight': torch.zeros(8, 3, 7, 7), 'bn1.weight': torch.ones(8)}
    with pytest.raises(ValueError, match=r"match no known layout.*conv1\.weight"):
        convert_vit(sd)


def test_unexplained_keys_strict_error_or_loud_warning(tmp_path, log_lines):
    sd = _timm_state_dict(_ours())
    sd['reg_token'] = torch.zeros(1, 4, 32)  # a timm variant densevit does not know
    with pytest.raises(ValueError, match='reg_token'):
        convert_vit(sd, strict=True)
    del sd['blocks.1.mlp.fc2.weight']
    path = tmp_path / 'odd.pth'
    torch.save(sd, path)
    report = load_pretrained(_ours(), path, convert=convert_vit)
    assert report.unexpected == ['reg_token'] and report.missing == ['blocks.1.mlp.fc2.weight']
    warnings = [m for lvl, m in log_lines if lvl >= logging.WARNING]
    assert any('MISSING' in m and 'blocks.1.mlp.fc2.weight' in m for m in warnings)
    assert any('UNEXPECTED' in m and 'reg_token' in m for m in warnings)


def test_nested_checkpoint_and_weights_only(tmp_path):
    """{'model': ...} (DeiT/MAE files) is unwrapped; arbitrary objects are refused."""
    sd = _timm_state_dict(_ours())
    torch.save({'model': sd, 'epoch': 3}, tmp_path / 'nested.pth')
    assert set(read_checkpoint(tmp_path / 'nested.pth')) == set(sd)
    # the official DETR / DeiT scripts save their argparse arguments beside the weights
    torch.save({'model': sd, 'args': argparse.Namespace(lr=1e-4)}, tmp_path / 'pickled.pth')
    with pytest.raises(Exception, match=r'^the global argparse\.Namespace: refusing to load .*pickled\.pth'):
        read_checkpoint(tmp_path / 'pickled.pth')


def test_class_token_row_dropped_for_a_vit_without_class_token(tmp_path, log_lines):
    """A timm file (class token, table [1, 1 + 4x4, D]) into a ViT with
    ``with_cls_token=False`` built for another grid: token and row dropped, grid resized
    (once 'cannot resize a table of 17 grid rows')."""
    src = randomize_(_ours())
    path = tmp_path / 'timm_vit.pth'
    torch.save(_timm_state_dict(src), path)
    dst = _ours(img_size=48, with_cls_token=False)
    report = load_pretrained(dst, path, convert=convert_vit)
    assert not (report.missing or report.unexpected or report.mismatched)
    torch.testing.assert_close(dst.pos_embed.weight,
                               src.pos_embed.table((6, 6))[:, 1:])
    assert any('cls_token and its position row dropped' in m for _, m in log_lines)


def test_a_file_converted_before_options_were_recorded_warns_that_they_are_unknown(
        tmp_path, log_lines):
    """A bare state dict in densevit's layout (what the converters wrote before they kept
    the origin's options in a meta) loads with the config's options and one warning."""
    src = randomize_(_ours())
    torch.save(src.state_dict(), tmp_path / 'old_converted.pth')
    dst = _ours(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'old_converted.pth')))
    dst.init_weights()
    torch.testing.assert_close(dst.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight)
    (line,) = [m for lvl, m in log_lines if lvl == logging.WARNING and 'origin options' in m]
    assert 'old_converted.pth records no origin options' in line
    assert "the config's are used ({'layer_norm_eps': 1e-06})" in line
    # densevit's own training checkpoints carry mmengine's meta: no warning
    log_lines.clear()
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in src.state_dict().items()},
                'meta': {'iter': 4}}, tmp_path / 'iter_4.pth')
    again = _ours(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'iter_4.pth'),
                                prefix='backbone.'))
    again.init_weights()
    assert not [m for _, m in log_lines if 'origin options' in m]
