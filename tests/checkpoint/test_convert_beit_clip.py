"""Hugging Face BEiT, Data2VecVision (BEiT's layout) and CLIP image-tower checkpoints:
converted and loaded into densevit's one ViT, whose token sequence and feature maps equal
HF's on random weights (every saved tensor re-drawn, eval mode) at the config's size and at
sizes where HF resizes its position code (BEiT: the relative bias or absolute table, always;
CLIP: ``interpolate_pos_encoding=True``)."""
import functools

import pytest
import torch
from mmengine.registry import DefaultScope

from densevit.checkpoint.convert import convert_any
from densevit.checkpoint.match import CheckpointMismatchError, load_into
from densevit.checkpoint.read import read_checkpoint
from densevit.checkpoint.vit import convert_vit
from densevit.engine.layer_decay_constructor import get_layer_id
from densevit.models.backbones.vit import VisionTransformer
from densevit.registry import MODELS
from densevit.utils.random_init import randomize_

from hf_vit_checks import (
    assert_feature_maps_match,
    assert_loads_like_hf,
    assert_tokens_match,
    converted_with_the_command,
    max_diff,
    pretrained,
    warning_lines,
)

transformers = pytest.importorskip('transformers')

WIDTH, HEADS, HIDDEN, PATCH, IMG = 32, 2, 64, 16, 64  # a 4 x 4 grid
SIZES = [(64, 64),  # the config's size: the position code as stored
         (80, 112),  # 5 x 7 patches: resized
         (72, 100)]  # not a multiple of 16: HF's convolution drops the rest (4 x 6), ours crops
# (name, HF config options, densevit options): BEiT's relative bias per layer (its fine-tuned
# models) and shared (its pre-trained ones), and its absolute table
BEIT = {
    'relative': (dict(use_relative_position_bias=True, use_mean_pooling=False),
                 dict(pos_embed=dict(type='relative'), interpolate_mode='bilinear',
                      final_norm=True)),
    'shared': (dict(use_shared_relative_position_bias=True),
               dict(pos_embed=dict(type='relative', placement='every_layer_shared'),
                    interpolate_mode='bilinear', final_norm=False)),
    'absolute': (dict(use_absolute_position_embeddings=True),
                 dict(pos_embed=dict(type='learned_1d'), interpolate_mode='bicubic',
                      final_norm=False)),
}
FAMILIES = ('Beit', 'Data2VecVision')
CLIP_OPTIONS = {'layer_norm_eps': 1e-5, 'interpolate_mode': 'bicubic'}


def _config(family, case, layers=2, **kwargs):
    return getattr(transformers, f'{family}Config')(
        hidden_size=WIDTH, num_hidden_layers=layers, num_attention_heads=HEADS,
        intermediate_size=HIDDEN, image_size=IMG, patch_size=PATCH, **{**BEIT[case][0], **kwargs})


def _hf_beit(family, case, model='Model', layers=2, **kwargs):
    """A tiny HF BEiT / Data2VecVision with every tensor random (tables, lambdas, norms...)."""
    cls = getattr(transformers, family + model)
    return randomize_(cls(_config(family, case, layers, **kwargs))).eval()


def _arch(layers=2):
    return dict(embed_dims=WIDTH, num_layers=layers, num_heads=HEADS, feedforward_channels=HIDDEN)


def _beit(case, layers=2, **kwargs):
    """The densevit ViT that these files fit."""
    args = dict(arch=_arch(layers), img_size=IMG, patch_size=PATCH, qkv_bias=(True, False, True),
                layer_scale_init_value=0.1, layer_norm_eps=1e-12, crop_to_patch=True,
                **BEIT[case][1])
    return VisionTransformer(**{**args, **kwargs}).eval()


def _hf_clip(whole=False, act='quick_gelu'):
    vision = dict(hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS,
                  intermediate_size=HIDDEN, image_size=IMG, patch_size=PATCH, hidden_act=act)
    if whole:
        text = dict(hidden_size=WIDTH, num_hidden_layers=1, num_attention_heads=HEADS,
                    intermediate_size=HIDDEN, vocab_size=99, max_position_embeddings=16,
                    bos_token_id=0, eos_token_id=2, pad_token_id=1)
        model = transformers.CLIPModel(transformers.CLIPConfig(
            text_config=text, vision_config=vision, projection_dim=16))
    else:
        model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**vision))
    return randomize_(model).eval()


def _clip(**kwargs):
    args = dict(arch=_arch(), img_size=IMG, patch_size=PATCH, pre_norm=True, final_norm=False,
                act_cfg=dict(type='QuickGELU'), crop_to_patch=True, **CLIP_OPTIONS)
    return VisionTransformer(**{**args, **kwargs}).eval()


def _resizing(hf):
    """HF CLIP resizes its table only when asked (and refuses other sizes otherwise)."""
    return functools.partial(hf, interpolate_pos_encoding=True)


def _saved(model, folder):
    """``save_pretrained`` into ``folder``: its model.safetensors (Hub file names)."""
    model.save_pretrained(folder)
    return folder / 'model.safetensors'


@pytest.fixture(scope='module', params=[(f, c) for f in FAMILIES for c in BEIT],
                ids=lambda p: f'{p[0]}-{p[1]}')
def hf_beit(request, tmp_path_factory):
    family, case = request.param
    model = _hf_beit(family, case)
    return family, case, model, _saved(model, tmp_path_factory.mktemp('hf_beit'))


@pytest.fixture(scope='module')
def hf_clip(tmp_path_factory):
    model = _hf_clip()
    return model, _saved(model, tmp_path_factory.mktemp('hf_clip'))


# ---------------------------------------------------------------- BEiT / Data2VecVision

@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_beit_tokens_match(hf_beit, source):
    """The whole last hidden state and the output map at the config's size, a resized
    position code and a size HF crops; Hub names (encoder.layer.N.attention.attention.query)
    and transformers 5's (layers.N.attention.q_proj) alike."""
    family, case, hf, path = hf_beit
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    converted = convert_vit(sd, strict=True)
    assert converted.layout == 'Hugging Face BEiT'
    assert converted.options == {'layer_norm_eps': 1e-12,
                                 'interpolate_mode': BEIT[case][1]['interpolate_mode']}
    ours = _beit(case)
    load_into(ours, converted, source, strict=True)
    assert_tokens_match(ours, hf, SIZES, PATCH)


def test_beit_layout_is_densevit_relative_with_class_entries():
    """BEiT's table [(2h-1)(2w-1) + 3, heads] is densevit's offset table and its three class
    entries (class->patch, patch->class, class->class), in that order."""
    hf = _hf_beit('Beit', 'relative')
    converted = convert_vit(hf.state_dict(), strict=True)
    table = hf.layers[1].relative_position_bias.relative_position_bias_table
    assert converted['pos_embed.1.relative_position_bias_table'].shape == (49, HEADS)
    torch.testing.assert_close(converted['pos_embed.1.extra_token_table'], table[-3:].detach())
    ours = _beit('relative')
    load_into(ours, converted, 'hf', strict=True)
    bias = ours.pos_embed[1].bias((4, 4))[0]
    ref = hf.layers[1].relative_position_bias((4, 4))[0]
    torch.testing.assert_close(bias, ref, rtol=0, atol=0)


def test_hf_interpolate_pos_encoding_changes_nothing_for_beit(hf_beit):
    """HF BEiT resizes its position code at every size; ``interpolate_pos_encoding=True``
    only resizes the full bias to its own size again (no change)."""
    family, case, hf, path = hf_beit
    ours = _beit(case)
    load_into(ours, convert_vit(read_checkpoint(path), strict=True), 'hf', strict=True)
    assert_tokens_match(ours, _resizing(hf), SIZES[1:2], PATCH)


@pytest.mark.parametrize('case', ['relative', 'shared'])
def test_the_other_resize_mode_is_off_and_named_in_one_warning(case, log_lines):
    """HF resizes the relative table bilinearly; bicubic is measurably off at another grid,
    and loading into such a model says so in one line."""
    hf = _hf_beit('Beit', case)
    converted = convert_vit(hf.state_dict(), strict=True)
    ours = _beit(case, interpolate_mode='bicubic')
    load_into(ours, converted, 'beit.safetensors', origin=converted.layout,
              options=converted.options)
    (line,) = warning_lines(log_lines)
    assert 'was built with interpolate_mode=bilinear; this model keeps interpolate_mode=bicubic' \
        in line
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        assert max_diff(ours.forward_visible(x), hf(pixel_values=x).last_hidden_state) > 1e-3


def test_a_shared_bias_loads_into_every_layer():
    """A shared table (BEiT's pre-trained models) loaded into a per-layer model (its
    fine-tuning): each layer gets a copy, and the outputs stay HF's."""
    hf = _hf_beit('Beit', 'shared')
    ours = _beit('relative', final_norm=False)
    load_into(ours, convert_vit(hf.state_dict(), strict=True), 'hf', strict=True)
    shared = hf.shared_position_bias.relative_position_bias_table
    for pe in ours.pos_embed:
        torch.testing.assert_close(pe.relative_position_bias_table, shared[:-3].detach())
        torch.testing.assert_close(pe.extra_token_table, shared[-3:].detach())
    assert ours.pos_embed[0].relative_position_bias_table.data_ptr() != \
        ours.pos_embed[1].relative_position_bias_table.data_ptr()
    assert_tokens_match(ours, hf, SIZES[:2], PATCH)


def test_pos_grid_checkpoint_reads_a_relative_table(tmp_path):
    """``pos_grid='checkpoint'`` keeps the file's 4 x 4 table for a model of another
    ``img_size``, resizing it straight to each input's grid as HF does."""
    hf = _hf_beit('Beit', 'relative')
    path = _saved(hf, tmp_path)
    make = functools.partial(_beit, 'relative', img_size=96, pos_grid='checkpoint')
    ours = pretrained(make, path)
    assert ours.pos_embed[0].num_patches_hw == (4, 4) and ours.grid_hw == (6, 6)
    assert_tokens_match(ours, hf, SIZES, PATCH)
    on_load = pretrained(functools.partial(_beit, 'relative', img_size=96), path)
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        assert max_diff(on_load.forward_visible(x), hf(pixel_values=x).last_hidden_state) > 1e-4


@pytest.mark.parametrize('case', ['relative', 'shared'])
def test_hf_beit_backbone_feature_maps_match(case, tmp_path):
    """``BeitBackbone``'s stages 1 and 3 are densevit's layers 0 and 2, never normalised
    (with ``use_mean_pooling=False`` its file has a final ``layernorm`` that the maps never
    pass: final_norm=False leaves it unexpected); its save_pretrained file (mixed beit. /
    bare prefixes) loads the same."""
    hf = _hf_beit('Beit', case, model='Backbone', layers=3, out_indices=[1, 3],
                  use_mean_pooling=True)
    for sd in (hf.state_dict(), read_checkpoint(_saved(hf, tmp_path))):
        ours = _beit(case, layers=3, out_indices=(0, 2), final_norm=False)
        load_into(ours, convert_vit(sd, strict=True), 'hf', strict=True)
        assert_feature_maps_match(ours, hf, SIZES)


def test_a_backbone_fpn_is_dropped_and_the_maps_before_it_match(log_lines):
    """``add_fpn``: HF's pyramid (deconvolutions, BatchNorm, max-pool) is a neck densevit
    does not load; the ViT's maps are HF's before it."""
    hf = _hf_beit('Beit', 'relative', model='Backbone', layers=4, out_indices=[1, 2, 3, 4],
                  add_fpn=True, use_mean_pooling=True)
    converted = convert_vit(hf.state_dict(), strict=True)
    assert any('dropped' in m and 'fpn.fpn1' in m and 'neck' in m for _, m in log_lines)
    ours = _beit('relative', layers=4, out_indices=(0, 1, 2, 3), final_norm=False)
    load_into(ours, converted, 'hf', strict=True)
    hf.fpn = torch.nn.Identity()
    assert_feature_maps_match(ours, hf, SIZES[:2])


@pytest.mark.parametrize('family,model,inner', [
    ('Beit', 'ForImageClassification', 'beit'),
    ('Beit', 'ForMaskedImageModeling', 'beit'),
    ('Beit', 'ForSemanticSegmentation', 'beit'),
    ('Data2VecVision', 'ForImageClassification', 'data2vec_vision'),
    ('Data2VecVision', 'ForSemanticSegmentation', 'data2vec_vision'),
])
def test_whole_model_files_load_as_backbones(family, model, inner, tmp_path, log_lines):
    """Classifier, masked-image-modelling and segmentation files (the model under
    ``beit.`` / ``data2vec_vision.``): their backbone is the nested model."""
    extra = dict(out_indices=[1, 2, 3, 4]) if model == 'ForSemanticSegmentation' else {}
    case = 'relative' if model != 'ForMaskedImageModeling' else 'shared'
    hf = _hf_beit(family, case, model=model, layers=4, use_mean_pooling=True, **extra)
    path = _saved(hf, tmp_path)
    ours = _beit(case, layers=4, final_norm=False)
    converted = convert_vit(read_checkpoint(path), strict=True)
    load_into(ours, converted, str(path), strict=True)
    dropped = [m for _, m in log_lines if 'dropped' in m]
    assert dropped and not warning_lines(log_lines)
    if model == 'ForMaskedImageModeling':
        assert converted.layout == 'Hugging Face BEiT (masked image modelling)'
        assert any("'layernorm." in m and 'lm_head' in m for m in dropped)
    assert_tokens_match(ours, getattr(hf, inner), SIZES[:2], PATCH)


def test_beit_whole_file_through_the_converter_command(hf_beit, tmp_path, log_lines):
    """``tools/convert/checkpoint.py`` (whole model, else backbone): the converted file
    records the origin's options and loads with the same outputs through init_cfg."""
    family, case, hf, path = hf_beit
    meta = converted_with_the_command(path, tmp_path / 'beit.pth')
    assert meta['densevit_origin'] == 'Hugging Face BEiT'
    assert meta['densevit_options']['interpolate_mode'] == BEIT[case][1]['interpolate_mode']
    assert_loads_like_hf(functools.partial(_beit, case), tmp_path / 'beit.pth', hf, (80, 112),
                         log_lines)


def test_init_cfg_pretrained_loads_the_save_pretrained_file(hf_beit, log_lines):
    family, case, hf, path = hf_beit
    assert_loads_like_hf(functools.partial(_beit, case), path, hf, (80, 112), log_lines)


def test_two_position_codes_are_refused():
    for extra in (dict(use_absolute_position_embeddings=True),
                  dict(use_shared_relative_position_bias=True)):
        hf = _hf_beit('Beit', 'relative', **extra)
        with pytest.raises(ValueError, match="has one position code"):
            convert_vit(hf.state_dict())


# ---------------------------------------------------------------- CLIP

@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_clip_tokens_match(hf_clip, source):
    """CLIP's last hidden state (before ``post_layernorm``, which only the pooled class token
    gets): class embedding, position table, ``pre_layrnorm``, QuickGELU, no patch bias."""
    hf, path = hf_clip
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    converted = convert_vit(sd, strict=True)
    assert converted.layout == 'Hugging Face CLIP (image tower)'
    assert converted.options == CLIP_OPTIONS
    assert (converted['patch_embed.proj.bias'] == 0).all()
    ours = _clip()
    load_into(ours, converted, source, strict=True)
    assert_tokens_match(ours, _resizing(hf), SIZES, PATCH)


def test_clip_model_file_takes_the_image_tower(tmp_path, log_lines):
    """A whole ``CLIPModel`` (``vision_model.`` and ``text_model.``): the image tower, the text
    tower dropped in one INFO line."""
    hf = _hf_clip(whole=True)
    path = _saved(hf, tmp_path)
    assert any(k.startswith('vision_model.') for k in read_checkpoint(path))
    ours = pretrained(_clip, path)
    text = [(lvl, m) for lvl, m in log_lines if "CLIP's text tower" in m]
    assert len(text) == 1 and text[0][0] == 20 and 'text_model.' in text[0][1]
    assert not warning_lines(log_lines)
    assert_tokens_match(ours, _resizing(hf.vision_model), SIZES[:2], PATCH)


def test_clip_needs_its_activation_and_pre_norm(hf_clip):
    """GELU for QuickGELU, or no pre-norm, is measurably off: the comparison tells them apart."""
    hf, path = hf_clip
    converted = convert_vit(read_checkpoint(path), strict=True)
    x = torch.randn(1, 3, IMG, IMG)
    for change in (dict(act_cfg=None), dict(pre_norm=False)):
        ours = _clip(**change)
        load_into(ours, converted, 'clip')
        with torch.no_grad():
            assert max_diff(ours.forward_visible(x), hf(pixel_values=x).last_hidden_state) > 1e-3


def test_clip_init_cfg_and_converter_command(hf_clip, tmp_path, log_lines):
    hf, path = hf_clip
    assert_loads_like_hf(_clip, path, _resizing(hf), (80, 112), log_lines)
    meta = converted_with_the_command(path, tmp_path / 'clip.pth')
    assert meta == dict(densevit_origin='Hugging Face CLIP (image tower)',
                        densevit_options=CLIP_OPTIONS)
    assert_loads_like_hf(_clip, tmp_path / 'clip.pth', _resizing(hf), (72, 100), log_lines)
    assert convert_any(read_checkpoint(path)).layout == 'Hugging Face CLIP (image tower)'


def test_options_build_from_a_config():
    """``act_cfg=dict(type='QuickGELU')`` and ``pre_norm`` from a registry config; the
    defaults leave a ViT as it was (GELU, no pre-norm); pre_norm goes with the stem."""
    cfg = dict(type='VisionTransformer', arch=_arch(1), img_size=IMG, patch_size=PATCH,
               pre_norm=True, act_cfg=dict(type='QuickGELU'), frozen_stages=0)
    with DefaultScope.overwrite_default_scope('densevit'):
        vit = MODELS.build(cfg)
    assert type(vit.blocks[0].mlp.act).__name__ == 'QuickGELU'
    assert not any(p.requires_grad for p in vit.pre_norm.parameters())
    plain = VisionTransformer(arch=_arch(1), img_size=IMG, patch_size=PATCH)
    assert plain.pre_norm is None and isinstance(plain.blocks[0].mlp.act, torch.nn.GELU)
    assert not any(k.startswith('pre_norm') for k in plain.state_dict())
    assert get_layer_id('backbone.pre_norm.weight', 1) == 0  # layer decay: with the stem
    with pytest.raises(ValueError, match='gated with its own'):
        VisionTransformer(arch=_arch(1), ffn_type='swiglu', act_cfg=dict(type='QuickGELU'))


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize('which,change,message', [
    ('beit', dict(patch_size=8), "with patch size 16, the model's ViT has patch size 8"),
    ('beit', dict(arch=dict(_arch(), embed_dims=48)), "of width 32, the model's ViT has width 48"),
    ('beit', dict(arch=_arch(3)), "with 2 layers, the model's ViT has 3 (num_layers)"),
    ('beit', dict(num_register_tokens=2), "with 0 register tokens, the model's ViT has 2"),
    ('beit', dict(qkv_bias=True), "with q, k, v biases (True, False, True), the model's ViT "
                                  "has (True, True, True)"),
    ('clip', dict(patch_size=8), "with patch size 16, the model's ViT has patch size 8"),
    ('clip', dict(arch=_arch(3)), "with 2 layers, the model's ViT has 3 (num_layers)"),
])
def test_a_file_of_another_shape_is_one_error_naming_both(tmp_path, which, change, message):
    if which == 'beit':
        hf, make, name = _hf_beit('Beit', 'relative'), functools.partial(_beit, 'relative'), \
            'Hugging Face BEiT'
    else:
        hf, make, name = _hf_clip(), _clip, 'Hugging Face CLIP (image tower)'
    checkpoint = str(_saved(hf, tmp_path))
    with pytest.raises(CheckpointMismatchError) as err:
        pretrained(functools.partial(make, **change), checkpoint)
    text = str(err.value)
    assert '\n' not in text and checkpoint in text
    assert f'it is a {name} checkpoint {message}' in text
