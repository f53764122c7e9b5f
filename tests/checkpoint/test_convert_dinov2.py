"""Hugging Face DINOv2 checkpoints (with and without registers, MLP and SwiGLU): converted and
loaded into densevit's ViT, whose token sequence and feature maps equal HF's on random weights."""
import functools

import pytest
import torch

from densevit.checkpoint.match import CheckpointMismatchError, load_into
from densevit.checkpoint.pretrained import load_pretrained
from densevit.checkpoint.read import read_checkpoint
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.random_init import randomize_

from hf_vit_checks import (
    assert_feature_maps_match,
    assert_loads_like_hf,
    assert_tokens_match,
    converted_with_the_command,
    max_diff,
    warning_lines,
)

transformers = pytest.importorskip('transformers')

WIDTH, HEADS, PATCH, IMG = 32, 2, 14, 56  # a 4x4 table
SIZES = [(56, 56),  # the pre-training size: the table as stored
         (70, 84),  # 5x6 patches: the table resized
         (63, 77)]  # not a multiple of 14: HF's convolution drops the rest (4x5), ours crops
CASES = [(0, False), (0, True), (2, False), (2, True)]  # (register tokens, SwiGLU)


def _hf(registers, swiglu, layers=2, backbone=False, out_indices=None):
    """A tiny HF DINOv2 with every tensor random (layer scale, norms, biases, tokens)."""
    kind = 'Dinov2WithRegisters' if registers else 'Dinov2'
    extra = dict(num_register_tokens=registers) if registers else {}
    if out_indices is not None:
        extra['out_indices'] = out_indices
    cfg = getattr(transformers, f'{kind}Config')(
        hidden_size=WIDTH, num_hidden_layers=layers, num_attention_heads=HEADS,
        image_size=IMG, patch_size=PATCH, use_swiglu_ffn=swiglu, **extra)
    model = getattr(transformers, kind + ('Backbone' if backbone else 'Model'))(cfg)
    return randomize_(model).eval()


def _ours(registers, swiglu, layers=2, antialias=None, **kwargs):
    """The densevit ViT these files fit (HF's table resize: antialiased with registers)."""
    antialias = bool(registers) if antialias is None else antialias
    return VisionTransformer(
        arch=dict(embed_dims=WIDTH, num_layers=layers, num_heads=HEADS,
                  feedforward_channels=4 * WIDTH),
        img_size=IMG, patch_size=PATCH, num_register_tokens=registers,
        layer_scale_init_value=1.0, ffn_type='swiglu' if swiglu else 'mlp',
        interpolate_mode='bicubic_antialias' if antialias else 'bicubic', crop_to_patch=True,
        **kwargs).eval()


@pytest.fixture(scope='module', params=CASES, ids=lambda c: f'registers{c[0]}-swiglu{c[1]}')
def hf_dinov2(request, tmp_path_factory):
    registers, swiglu = request.param
    model = _hf(registers, swiglu)
    path = tmp_path_factory.mktemp('hf_dinov2')
    model.save_pretrained(path)  # Hub file layout (attention.attention.query, mlp.weights_in)
    return registers, swiglu, model, path / 'model.safetensors'


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_dinov2_tokens_match(hf_dinov2, source):
    """The whole last hidden state (class token, registers, patches) and the output map,
    at the pre-training size, a resized table and a size HF crops."""
    registers, swiglu, hf, path = hf_dinov2
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    converted = convert_vit(sd, strict=True)
    with_registers = ' with registers' if registers else ''
    assert converted.layout == f'Hugging Face DINOv2{with_registers}'
    ours = _ours(registers, swiglu)
    load_into(ours, converted, source, strict=True)
    assert_tokens_match(ours, hf, SIZES, PATCH)


def test_the_table_resize_differs_with_and_without_antialias(hf_dinov2):
    """HF resizes the registers model's table with antialias=True, the other's without:
    the other mode is measurably off, so the comparison above tells them apart."""
    registers, swiglu, hf, path = hf_dinov2
    ours = _ours(registers, swiglu, antialias=not registers)
    load_pretrained(ours, path, convert=convert_vit)
    x = torch.randn(1, 3, 70, 84)
    with torch.no_grad():
        assert max_diff(ours.forward_visible(x), hf(pixel_values=x).last_hidden_state) > 1e-3


@pytest.mark.parametrize('registers,swiglu', [(0, False), (2, True)])
def test_hf_dinov2_backbone_feature_maps_match(registers, swiglu):
    """``Dinov2Backbone``'s stages 1 and 3 (the final LayerNorm on each) are densevit's
    layers 0 and 2 with ``norm_every_output``."""
    hf = _hf(registers, swiglu, layers=3, backbone=True, out_indices=[1, 3])
    ours = _ours(registers, swiglu, layers=3, out_indices=(0, 2), norm_every_output=True)
    load_into(ours, convert_vit(hf.state_dict(), strict=True), 'hf', strict=True)
    assert_feature_maps_match(ours, hf, SIZES)


def test_init_cfg_pretrained_loads_the_save_pretrained_file(hf_dinov2, log_lines):
    registers, swiglu, hf, path = hf_dinov2
    assert_loads_like_hf(functools.partial(_ours, registers, swiglu), path, hf, (70, 84),
                         log_lines)
    assert any('dropped 1 key(s)' in m and 'mask_token' in m for _, m in log_lines)


def test_converter_command_output_loads_with_its_origin(hf_dinov2, tmp_path, log_lines):
    """``tools/convert/checkpoint.py``: the converted file records its origin's options and
    loads with the same outputs."""
    registers, swiglu, hf, path = hf_dinov2
    meta = converted_with_the_command(path, tmp_path / 'dinov2.pth')
    assert meta['densevit_options']['interpolate_mode'] == ('bicubic_antialias' if registers
                                                            else 'bicubic')
    assert_loads_like_hf(functools.partial(_ours, registers, swiglu), tmp_path / 'dinov2.pth',
                         hf, (70, 84), log_lines)


def test_the_other_resize_mode_is_named_in_one_warning(log_lines):
    hf = _hf(2, False)
    ours = _ours(2, False, antialias=False)
    load_into(ours, convert_vit(hf.state_dict()), 'reg.safetensors',
              origin='Hugging Face DINOv2 with registers',
              options=dict(interpolate_mode='bicubic_antialias'))
    (line,) = warning_lines(log_lines)
    assert ('was built with interpolate_mode=bicubic_antialias; this model keeps '
            'interpolate_mode=bicubic') in line


def test_classifier_prefixes_and_split_swiglu_are_recognised():
    """``Dinov2ForImageClassification`` keys (under ``dinov2.`` / ``dinov2_with_registers.``,
    a classifier) and the module names of SwiGLU (gate_proj, up_proj: fused, gate first)."""
    for registers, prefix in ((0, 'dinov2.'), (2, 'dinov2_with_registers.')):
        hf = _hf(registers, True)
        sd = {prefix + k: v for k, v in hf.state_dict().items()}
        sd['classifier.weight'], sd['classifier.bias'] = torch.randn(5, 2 * WIDTH), torch.randn(5)
        converted = convert_vit(sd, strict=True)
        mlp = hf.encoder.layer[1].mlp
        # transformers >= 5.2x names the halves; earlier releases keep one fused weights_in
        fused = (torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                 if hasattr(mlp, 'gate_proj') else mlp.weights_in.weight)
        torch.testing.assert_close(converted['blocks.1.mlp.fc1.weight'], fused)
        _ours(registers, True).load_state_dict(converted, strict=True)


@pytest.mark.parametrize('change,message', [
    (dict(patch_size=8), "with patch size 14, the model's ViT has patch size 8 (patch_size)"),
    (dict(num_register_tokens=0), "with 2 register tokens, the model's ViT has 0 "
                                  "(num_register_tokens)"),
    (dict(num_register_tokens=4), "with 2 register tokens, the model's ViT has 4 "
                                  "(num_register_tokens)"),
    (dict(arch=dict(embed_dims=48, num_layers=2, num_heads=2, feedforward_channels=128)),
     "of width 32, the model's ViT has width 48 (embed_dims)"),
    (dict(arch=dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=128)),
     "with 2 layers, the model's ViT has 3 (num_layers)"),
])
def test_a_file_of_another_shape_is_one_error_naming_both(tmp_path, change, message):
    path = tmp_path / 'hf'
    _hf(2, False).save_pretrained(path)
    args = dict(img_size=IMG, patch_size=PATCH, num_register_tokens=2,
                layer_scale_init_value=1.0, arch=dict(embed_dims=WIDTH, num_layers=2,
                                                      num_heads=HEADS, feedforward_channels=128))
    args.update(change)
    checkpoint = str(path / 'model.safetensors')
    ours = VisionTransformer(**args, init_cfg=dict(type='Pretrained', checkpoint=checkpoint))
    with pytest.raises(CheckpointMismatchError) as err:
        ours.init_weights()
    text = str(err.value)
    assert '\n' not in text and checkpoint in text
    assert f'it is a Hugging Face DINOv2 with registers checkpoint {message}' in text
