"""Hugging Face DINOv3 checkpoints (plain and gated MLP, with and without a key bias and
registers): converted and loaded into densevit's ViT, whose token sequence and feature maps
equal HF's on random weights at several input sizes (RoPE computed for each grid)."""
import functools

import pytest
import torch

from densevit.checkpoint.match import CheckpointMismatchError, load_into
from densevit.checkpoint.read import read_checkpoint
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.random_init import randomize_

from hf_vit_checks import (
    assert_feature_maps_match,
    assert_loads_like_hf,
    assert_tokens_match,
    converted_with_the_command,
    pretrained,
    warning_lines,
)

transformers = pytest.importorskip('transformers')

WIDTH, HEADS, HIDDEN, PATCH, IMG = 32, 2, 80, 16, 64  # head width 16; a 4 x 4 grid
SIZES = [(64, 64),  # the config's size
         (80, 112),  # 5 x 7 patches: RoPE for another grid
         (72, 100)]  # not a multiple of 16: HF's convolution drops the rest (4 x 6), ours crops
# (name, HF options): the released ViT-S / B / L (MLP, no key bias, 4 registers), ViT-S+ /
# H+ / 7B (SwiGLU), and HF's other options (GELU-gated, a key bias, no registers)
CASES = {
    'mlp': dict(use_gated_mlp=False, key_bias=False, num_register_tokens=4),
    'swiglu': dict(use_gated_mlp=True, hidden_act='silu', key_bias=False,
                   num_register_tokens=4),
    'geglu-key_bias-no_registers': dict(use_gated_mlp=True, hidden_act='gelu', key_bias=True,
                                        num_register_tokens=0),
}
LAYOUT = {'mlp': 'Hugging Face DINOv3', 'swiglu': 'Hugging Face DINOv3 (gated MLP)',
          'geglu-key_bias-no_registers': 'Hugging Face DINOv3 (gated MLP)'}


def _hf(case, layers=2, backbone=False, **kwargs):
    """A tiny HF DINOv3 ViT with every tensor random (layer scale, norms, biases, tokens)."""
    cfg = transformers.DINOv3ViTConfig(
        hidden_size=WIDTH, num_hidden_layers=layers, num_attention_heads=HEADS,
        intermediate_size=HIDDEN, image_size=IMG, patch_size=PATCH, **CASES[case], **kwargs)
    model = (transformers.DINOv3ViTBackbone if backbone else transformers.DINOv3ViTModel)(cfg)
    return randomize_(model).eval()


def _ours(case, layers=2, **kwargs):
    """The densevit ViT these files fit."""
    hf = CASES[case]
    ffn = ({'silu': 'swiglu', 'gelu': 'geglu'}[hf['hidden_act']] if hf['use_gated_mlp']
           else 'mlp')
    args = dict(arch=dict(embed_dims=WIDTH, num_layers=layers, num_heads=HEADS,
                          feedforward_channels=HIDDEN),
                img_size=IMG, patch_size=PATCH, pos_embed=dict(type='rope', convention='dinov3'),
                num_register_tokens=hf['num_register_tokens'],
                qkv_bias=(True, hf['key_bias'], True), layer_scale_init_value=1.0,
                ffn_type=ffn, glu_hidden='full', layer_norm_eps=1e-5, crop_to_patch=True)
    return VisionTransformer(**{**args, **kwargs}).eval()


@pytest.fixture(scope='module', params=list(CASES))
def hf_dinov3(request, tmp_path_factory):
    case = request.param
    model = _hf(case)
    path = tmp_path_factory.mktemp('hf_dinov3')
    model.save_pretrained(path)  # Hub file layout (layer.N.*, not the module's model.layer.N.*)
    return case, model, path / 'model.safetensors'


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_dinov3_tokens_match(hf_dinov3, source):
    """The whole last hidden state (class token, registers, patches, after the final norm)
    and the output map, at the config's size, another grid and a size HF crops."""
    case, hf, path = hf_dinov3
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    assert any(k.startswith('model.layer.') for k in sd) == (source == 'module_state_dict')
    converted = convert_vit(sd, strict=True)
    assert converted.layout == LAYOUT[case]
    ours = _ours(case)
    load_into(ours, converted, source, strict=True)
    assert_tokens_match(ours, hf, SIZES, PATCH)


@pytest.mark.parametrize('case', ['mlp', 'swiglu'])
@pytest.mark.parametrize('apply_layernorm', [True, False])
def test_hf_dinov3_backbone_feature_maps_match(case, apply_layernorm):
    """``DINOv3ViTBackbone``'s stages 1 and 3 are densevit's layers 0 and 2; with
    ``apply_layernorm`` the final norm on each (``norm_every_output``), without it on the
    last only (as densevit's final norm)."""
    hf = _hf(case, layers=3, backbone=True, out_indices=[1, 3],
             apply_layernorm=apply_layernorm)
    ours = _ours(case, layers=3, out_indices=(0, 2), norm_every_output=apply_layernorm)
    load_into(ours, convert_vit(hf.state_dict(), strict=True), 'hf', strict=True)
    assert_feature_maps_match(ours, hf, SIZES)


def test_the_absent_key_bias_is_zero_and_never_learned():
    """qkv_bias=(True, False, True): q and v biases are parameters (HF's, once loaded), the
    key's a zero buffer outside the state dict; training leaves it zero."""
    hf = _hf('mlp')
    ours = _ours('mlp')
    converted = convert_vit(hf.state_dict(), strict=True)
    assert 'blocks.0.attn.qkv.bias' not in converted
    load_into(ours, converted, 'hf', strict=True)
    attn, hf_attn = ours.blocks[1].attn, hf.model.layer[1].attention
    assert hf_attn.k_proj.bias is None
    torch.testing.assert_close(attn.q_bias, hf_attn.q_proj.bias, rtol=0, atol=0)
    torch.testing.assert_close(attn.v_bias, hf_attn.v_proj.bias, rtol=0, atol=0)
    assert attn.qkv.bias is None and 'blocks.1.attn.k_bias' not in ours.state_dict()
    assert 'blocks.1.attn.k_bias' not in dict(ours.named_parameters())
    ours.train()
    optim = torch.optim.AdamW(ours.parameters(), lr=0.1, weight_decay=0.5)
    for _ in range(2):
        optim.zero_grad()
        ours(torch.randn(2, 3, IMG, IMG))[0].square().mean().backward()
        optim.step()
    assert (attn.k_bias == 0).all() and attn.q_bias.grad.abs().max() > 0


def test_init_cfg_pretrained_loads_the_save_pretrained_file(hf_dinov3, log_lines):
    case, hf, path = hf_dinov3
    assert_loads_like_hf(functools.partial(_ours, case), path, hf, (80, 112), log_lines)
    assert any('dropped 1 key(s)' in m and 'mask_token' in m for _, m in log_lines)


def test_converter_command_output_loads_with_its_origin(hf_dinov3, tmp_path, log_lines):
    """``tools/convert/checkpoint.py``: the converted file records its origin's LayerNorm
    eps and loads with the same outputs."""
    case, hf, path = hf_dinov3
    meta = converted_with_the_command(path, tmp_path / 'dinov3.pth')
    assert meta == dict(densevit_origin=LAYOUT[case],
                        densevit_options={'layer_norm_eps': 1e-5})
    assert_loads_like_hf(functools.partial(_ours, case), tmp_path / 'dinov3.pth', hf,
                         (80, 112), log_lines)


def test_another_layer_norm_eps_is_named_in_one_warning(log_lines):
    ours = _ours('mlp', layer_norm_eps=1e-6)
    converted = convert_vit(_hf('mlp').state_dict())
    load_into(ours, converted, 'dinov3.safetensors', origin=converted.layout,
              options=converted.options)
    (line,) = warning_lines(log_lines)
    assert 'was built with layer_norm_eps=1e-05; this model keeps layer_norm_eps=1e-06' in line


@pytest.mark.parametrize('change,message', [
    (dict(patch_size=8), "with patch size 16, the model's ViT has patch size 8 (patch_size)"),
    (dict(num_register_tokens=0), "with 4 register tokens, the model's ViT has 0 "
                                  "(num_register_tokens)"),
    (dict(arch=dict(embed_dims=48, num_layers=2, num_heads=2, feedforward_channels=HIDDEN)),
     "of width 32, the model's ViT has width 48 (embed_dims)"),
    (dict(arch=dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=HIDDEN)),
     "with 2 layers, the model's ViT has 3 (num_layers)"),
    (dict(qkv_bias=True), "with q, k, v biases (True, False, True), the model's ViT has "
                          "(True, True, True) (qkv_bias); build the ViT with "
                          "qkv_bias=(True, False, True)"),
])
def test_a_file_of_another_shape_is_one_error_naming_both(tmp_path, change, message):
    path = tmp_path / 'hf'
    _hf('mlp').save_pretrained(path)
    checkpoint = str(path / 'model.safetensors')
    with pytest.raises(CheckpointMismatchError) as err:
        pretrained(functools.partial(_ours, 'mlp', **change), checkpoint)
    text = str(err.value)
    assert '\n' not in text and checkpoint in text
    assert f'it is a Hugging Face DINOv3 checkpoint {message}' in text


def test_option_errors_and_widths():
    tiny = dict(arch=dict(embed_dims=WIDTH, num_layers=1, num_heads=HEADS,
                          feedforward_channels=HIDDEN), img_size=IMG, patch_size=PATCH)
    with pytest.raises(ValueError, match=r'three bools \(q, k, v\), got \(True, False\)'):
        VisionTransformer(**tiny, qkv_bias=(True, False))
    with pytest.raises(ValueError, match="hidden width rule 'half'"):
        VisionTransformer(**tiny, ffn_type='swiglu', glu_hidden='half')
    full = VisionTransformer(**tiny, ffn_type='geglu', glu_hidden='full').blocks[0].mlp
    two_thirds = VisionTransformer(**tiny, ffn_type='geglu').blocks[0].mlp
    assert full.fc2.in_features == HIDDEN and two_thirds.fc2.in_features == 56  # 80 * 2/3 -> 56
    x = torch.randn(3, WIDTH)
    gate, up = full.fc1(x).chunk(2, dim=-1)
    torch.testing.assert_close(full(x), full.fc2(torch.nn.functional.gelu(gate) * up))
    same = VisionTransformer(**tiny, qkv_bias=[True, True, True])  # a config's list
    assert same.qkv_bias == (True, True, True) and same.blocks[0].attn.qkv.bias is not None
