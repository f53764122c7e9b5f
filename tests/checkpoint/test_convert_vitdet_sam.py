"""Hugging Face ViTDet and SAM (image encoder) checkpoints: converted and loaded into
densevit's ViT with windowed attention, decomposed relative positions and (ViTDet) residual
blocks, whose maps equal HF's on random weights; the window padding and the decomposed term
checked by hand; activation checkpointing gives the same gradients."""
import functools
import math

import pytest
import torch
import torch.nn.functional as F

from densevit.checkpoint.match import CheckpointMismatchError, load_into
from densevit.checkpoint.read import read_checkpoint
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.models.layers.vitdet_attention import WindowedAttention
from densevit.utils.random_init import randomize_

from hf_vit_checks import (
    TOLERANCE,
    assert_feature_maps_match,
    converted_with_the_command,
    max_diff,
    pretrained,
    warning_lines,
)

transformers = pytest.importorskip('transformers')

WIDTH, HEADS, LAYERS, PATCH = 32, 2, 4, 8

# ViTDet: a 10 x 10 grid (80 px) in windows of 4 (padded to 12), layer 2 global; the table
# made for 64 px (8 x 8, resized at every forward, as HF), the global layer's decomposed
# tables for 80 px (resized for other grids)
VITDET_IMG, VITDET_PRETRAIN, VITDET_WINDOW = 80, 64, 4
VITDET_SIZES = [(80, 80),  # the config's size
                (96, 120)]  # 12 x 15 patches: both tables interpolated, 15 padded to 16
VITDET_CASES = {
    'relpos-residual': dict(use_relative_position_embeddings=True, residual_block_indices=[1]),
    'windows-only': dict(use_relative_position_embeddings=False, residual_block_indices=[]),
}
# SAM: a 12 x 12 grid (96 px) in windows of 5 (padded to 15), layers 1 and 3 global
SAM_IMG, SAM_WINDOW, SAM_GLOBAL, SAM_MLP = 96, 5, (1, 3), 64


def _hf_vitdet(case, backbone=True, out_indices=(2, 4)):
    cfg = transformers.VitDetConfig(
        hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        image_size=VITDET_IMG, pretrain_image_size=VITDET_PRETRAIN, patch_size=PATCH,
        window_size=VITDET_WINDOW, window_block_indices=[0, 1, 3], out_indices=list(out_indices),
        **VITDET_CASES[case])
    model = (transformers.VitDetBackbone if backbone else transformers.VitDetModel)(cfg)
    return randomize_(model).eval()


def _vitdet(case, out_indices=(1, 3), **kwargs):
    """The densevit ViT these files fit: ``pos_grid`` the pre-training grid (HF resizes
    that table at every forward)."""
    hf = VITDET_CASES[case]
    args = dict(arch=dict(embed_dims=WIDTH, num_layers=LAYERS, num_heads=HEADS,
                          feedforward_channels=4 * WIDTH),
                img_size=VITDET_IMG, patch_size=PATCH, pos_grid=(8, 8), with_cls_token=False,
                final_norm=False, window_size=VITDET_WINDOW, global_attn_indexes=(2,),
                decomposed_rel_pos=hf['use_relative_position_embeddings'],
                residual_block_indexes=tuple(hf['residual_block_indices']),
                out_indices=out_indices)
    return VisionTransformer(**{**args, **kwargs}).eval()


def _hf_sam(whole=False):
    vision = transformers.SamVisionConfig(
        hidden_size=WIDTH, output_channels=16, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, image_size=SAM_IMG, patch_size=PATCH, mlp_dim=SAM_MLP,
        window_size=SAM_WINDOW, global_attn_indexes=list(SAM_GLOBAL))
    if whole:
        return randomize_(transformers.SamModel(transformers.SamConfig(
            vision_config=vision.to_dict()))).eval()
    return randomize_(transformers.SamVisionModel(vision)).eval()


def _sam(**kwargs):
    args = dict(arch=dict(embed_dims=WIDTH, num_layers=LAYERS, num_heads=HEADS,
                          feedforward_channels=SAM_MLP),
                img_size=SAM_IMG, patch_size=PATCH, with_cls_token=False, final_norm=False,
                window_size=SAM_WINDOW, global_attn_indexes=SAM_GLOBAL, decomposed_rel_pos=True)
    return VisionTransformer(**{**args, **kwargs}).eval()


def _sam_map(hf, x):
    """SAM's last layer's output before its neck, as a map [B, D, h, w]."""
    return hf(pixel_values=x, output_hidden_states=True).hidden_states[-1].permute(0, 3, 1, 2)


def assert_sam_matches(ours, hf):
    """At SAM's only input size: densevit's map equals SAM's pre-neck map."""
    x = torch.randn(2, 3, SAM_IMG, SAM_IMG)
    with torch.no_grad():
        ref, (out,) = _sam_map(hf, x), ours(x)
    assert out.shape == ref.shape == (2, WIDTH, SAM_IMG // PATCH, SAM_IMG // PATCH)
    assert max_diff(out, ref) < TOLERANCE


@pytest.fixture(scope='module', params=list(VITDET_CASES))
def hf_vitdet(request, tmp_path_factory):
    case = request.param
    model = _hf_vitdet(case)
    path = tmp_path_factory.mktemp('hf_vitdet')
    model.save_pretrained(path)
    return case, model, path / 'model.safetensors'


@pytest.fixture(scope='module')
def hf_sam(tmp_path_factory):
    model = _hf_sam()
    path = tmp_path_factory.mktemp('hf_sam')
    model.save_pretrained(path)
    return model, path / 'model.safetensors'


# ---------------------------------------------------------------- ViTDet

@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_vitdet_backbone_feature_maps_match(hf_vitdet, source):
    """``VitDetBackbone``'s stages 2 and 4 are densevit's layers 1 and 3, at the config's
    size and at another (both position tables interpolated, the grid padded to windows)."""
    case, hf, path = hf_vitdet
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    converted = convert_vit(sd, strict=True)
    assert converted.layout == 'Hugging Face ViTDet'
    assert converted['pos_embed.weight'].shape == (1, 64, WIDTH)  # the class-token row dropped
    ours = _vitdet(case)
    load_into(ours, converted, source, strict=True)
    assert_feature_maps_match(ours, hf, VITDET_SIZES)


def test_hf_vitdet_model_last_hidden_state_matches():
    hf = _hf_vitdet('relpos-residual', backbone=False)
    ours = _vitdet('relpos-residual', out_indices=-1)
    load_into(ours, convert_vit(hf.state_dict(), strict=True), 'hf', strict=True)
    for size in VITDET_SIZES:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref, (out,) = hf(pixel_values=x).last_hidden_state, ours(x)
        assert out.shape == ref.shape and max_diff(out, ref) < TOLERANCE, size


def test_vitdet_init_cfg_pretrained_and_the_converter_command(hf_vitdet, tmp_path, log_lines):
    """Through ``init_cfg`` (``pos_grid='checkpoint'`` reads the file's 8 x 8 table), from the
    save_pretrained file and from the converter command's output: HF's maps, no warning."""
    case, hf, path = hf_vitdet
    meta = converted_with_the_command(path, tmp_path / 'vitdet.pth')
    assert meta == dict(densevit_origin='Hugging Face ViTDet',
                        densevit_options={'layer_norm_eps': 1e-6, 'interpolate_mode': 'bicubic'})
    for checkpoint in (path, tmp_path / 'vitdet.pth'):
        ours = pretrained(functools.partial(_vitdet, case, pos_grid='checkpoint'), checkpoint)
        assert ours.pos_embed.num_patches_hw == (8, 8)
        assert_feature_maps_match(ours, hf, VITDET_SIZES[1:])
    assert not warning_lines(log_lines)


# ---------------------------------------------------------------- SAM

@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_sam_encoder_matches_before_its_neck(hf_sam, source, log_lines):
    hf, path = hf_sam
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    converted = convert_vit(sd, strict=True)
    assert converted.layout == 'Hugging Face SAM (its image encoder)'
    assert converted['pos_embed.weight'].shape == (1, 144, WIDTH)  # [1, 12, 12, D] flattened
    assert not any(k.startswith('neck') for k in converted)
    assert any('dropped 6 key(s)' in m and "SAM's neck" in m for _, m in log_lines)
    ours = _sam()
    load_into(ours, converted, source, strict=True)
    assert_sam_matches(ours, hf)


@pytest.mark.parametrize('layer', [0, 1])  # a windowed layer, a global one
def test_a_mis_mapped_decomposed_table_is_far_off(hf_sam, layer):
    """The comparison above tells the two axes' tables apart: swapped, the map moves by far
    more than the tolerance."""
    hf, _ = hf_sam
    converted = convert_vit(hf.state_dict())
    h, w = f'blocks.{layer}.attn.rel_pos_h', f'blocks.{layer}.attn.rel_pos_w'
    converted[h], converted[w] = converted[w], converted[h]
    ours = _sam()
    load_into(ours, converted, 'swapped', strict=True)
    x = torch.randn(1, 3, SAM_IMG, SAM_IMG)
    with torch.no_grad():
        assert max_diff(ours(x)[0], _sam_map(hf, x)) > 0.1


def test_sam_model_file_loads_its_image_encoder(tmp_path, log_lines):
    """``SamModel``'s file: the prompt encoder and mask decoder dropped (logged), the image
    encoder loaded, through init_cfg and the converter command."""
    hf = _hf_sam(whole=True)
    hf.save_pretrained(tmp_path / 'sam')
    path = tmp_path / 'sam' / 'model.safetensors'
    assert any(k.startswith('mask_decoder.') for k in read_checkpoint(path))
    meta = converted_with_the_command(path, tmp_path / 'sam.pth')
    assert meta['densevit_origin'] == 'Hugging Face SAM (its image encoder)'
    for checkpoint in (path, tmp_path / 'sam.pth'):
        assert_sam_matches(pretrained(_sam, checkpoint), hf.vision_encoder)
    assert any("SAM's prompt encoder and mask decoder" in m for _, m in log_lines)
    assert not warning_lines(log_lines)


def test_sam_file_into_another_image_size_resizes_its_tables(hf_sam, log_lines):
    """A 128-pixel model (16 x 16): the absolute table and the global layers' decomposed
    tables are resized on load (logged); the windowed layers' fit as they are."""
    _, path = hf_sam
    ours = pretrained(functools.partial(_sam, img_size=128), path)
    assert ours.blocks[1].attn.rel_pos_h.shape == (31, WIDTH // HEADS)
    assert ours.blocks[0].attn.rel_pos_h.shape == (2 * SAM_WINDOW - 1, WIDTH // HEADS)
    resized = [m for _, m in log_lines if m.startswith('Resizing')]
    assert len(resized) == 1 + 2 * len(SAM_GLOBAL), resized
    (out,) = ours(torch.randn(1, 3, 128, 128))
    assert out.shape == (1, WIDTH, 16, 16) and torch.isfinite(out).all()


# ---------------------------------------------------------------- mismatches

@pytest.mark.parametrize('change,message', [
    (dict(patch_size=16), "with patch size 8, the model's ViT has patch size 16 (patch_size)"),
    (dict(arch=dict(embed_dims=48, num_layers=LAYERS, num_heads=HEADS,
                    feedforward_channels=SAM_MLP)),
     "of width 32, the model's ViT has width 48 (embed_dims)"),
    (dict(arch=dict(embed_dims=WIDTH, num_layers=3, num_heads=HEADS,
                    feedforward_channels=SAM_MLP), global_attn_indexes=(1,)),
     "with 4 layers, the model's ViT has 3 (num_layers)"),
    (dict(window_size=7),
     "whose layer 0 has relative positions spanning 5 (blocks.0.attn.rel_pos_h), the model's "
     "ViT attends there in windows of 7 (window_size=7); build the ViT with window_size=5"),
    (dict(global_attn_indexes=(3,)),
     "whose layer 1 has relative positions spanning 12 (blocks.1.attn.rel_pos_h), the model's "
     "ViT attends there in windows of 5"),
    (dict(decomposed_rel_pos=False),
     "with decomposed relative positions (blocks.0.attn.rel_pos_h), the model's ViT has none "
     "(decomposed_rel_pos=False); build the ViT with decomposed_rel_pos=True"),
])
def test_a_sam_file_of_another_shape_is_one_error_naming_both(hf_sam, change, message):
    _, path = hf_sam
    with pytest.raises(CheckpointMismatchError) as err:
        pretrained(functools.partial(_sam, **change), path)
    text = str(err.value)
    assert '\n' not in text and str(path) in text
    assert f'it is a Hugging Face SAM (its image encoder) checkpoint {message}' in text


def test_residual_blocks_the_model_lacks_are_one_error(tmp_path):
    _hf_vitdet('relpos-residual').save_pretrained(tmp_path)
    with pytest.raises(CheckpointMismatchError) as err:
        pretrained(functools.partial(_vitdet, 'relpos-residual', residual_block_indexes=()),
                   tmp_path / 'model.safetensors')
    assert '\n' not in str(err.value)
    assert ("with residual blocks after layers [1], the model's ViT has them after [] "
            "(residual_block_indexes); build the ViT with residual_block_indexes=(1,)"
            in str(err.value))


def test_a_file_without_tables_leaves_them_at_zero(tmp_path, log_lines):
    """An MAE-style file (class token, no decomposed tables) into a windowed ViT without a
    class token: the class token and its row dropped, the tables listed at INFO as not in
    this kind of checkpoint, zero; no warning."""
    plain = randomize_(VisionTransformer(
        arch=dict(embed_dims=WIDTH, num_layers=LAYERS, num_heads=HEADS,
                  feedforward_channels=SAM_MLP), img_size=SAM_IMG, patch_size=PATCH))
    official = plain.state_dict()  # official MAE's layout: timm's encoder, then the decoder
    official['pos_embed'] = official.pop('pos_embed.weight')
    official['mask_token'], official['decoder_embed.weight'] = torch.zeros(1, 1, 16), \
        torch.zeros(16, WIDTH)
    torch.save(dict(model=official), tmp_path / 'mae.pth')
    ours = pretrained(functools.partial(_sam, final_norm=True), tmp_path / 'mae.pth')
    assert not warning_lines(log_lines)
    assert any('not in this kind of checkpoint (expected)' in m and 'rel_pos_h' in m
               for _, m in log_lines)
    assert all((b.attn.rel_pos_h == 0).all() for b in ours.blocks)
    torch.testing.assert_close(ours.blocks[2].attn.qkv.weight, plain.blocks[2].attn.qkv.weight)


# ---------------------------------------------------------------- by hand

def _attention_by_hand(attn, tokens, hw):
    """Plain softmax attention over one grid [n, D] with the decomposed term written out
    pair by pair: logit(i, j) = q_i . k_j / sqrt(d) + q_i . Rh[yi - yj + h - 1]
    + q_i . Rw[xi - xj + w - 1], the tables resized to 2h - 1 / 2w - 1 rows."""
    h, w = hw
    n, D = tokens.shape
    d = D // attn.num_heads
    q, k, v = (attn.qkv(tokens).reshape(n, 3, attn.num_heads, d).permute(1, 2, 0, 3))
    rh = F.interpolate(attn.rel_pos_h.t()[None], size=2 * h - 1, mode='linear')[0].t()
    rw = F.interpolate(attn.rel_pos_w.t()[None], size=2 * w - 1, mode='linear')[0].t()
    logits = q @ k.transpose(-1, -2) / math.sqrt(d)
    for i in range(n):
        for j in range(n):
            (yi, xi), (yj, xj) = divmod(i, w), divmod(j, w)
            logits[:, i, j] += q[:, i] @ rh[yi - yj + h - 1] + q[:, i] @ rw[xi - xj + w - 1]
    out = (logits.softmax(-1) @ v).transpose(0, 1).reshape(n, D)
    return attn.proj(out)


def test_window_padding_by_hand():
    """A 5 x 4 grid in windows of 3: zero-padded to 6 x 6 (four windows, the padded zeros
    attended to, unmasked), each window attended by hand, the tokens put back and the
    padding cropped: the output is the 5 x 4 grid."""
    torch.manual_seed(0)
    attn = randomize_(WindowedAttention(8, 2, window_size=3, rel_pos_hw=(3, 3))).double().eval()
    H, W, M = 5, 4, 3
    x = torch.randn(1, H * W, 8, dtype=torch.float64)
    padded = F.pad(x[0].reshape(H, W, 8), (0, 0, 0, 6 - W, 0, 6 - H))  # [6, 6, 8]
    expected = torch.empty(6, 6, 8, dtype=torch.float64)
    for r in range(0, 6, M):
        for c in range(0, 6, M):
            window = padded[r:r + M, c:c + M].reshape(M * M, 8)
            expected[r:r + M, c:c + M] = _attention_by_hand(attn, window, (M, M)).reshape(M, M, 8)
    with torch.no_grad():
        out = attn(x, hw=(H, W))
        torch.testing.assert_close(out[0], expected[:H, :W].reshape(H * W, 8))
        # a global layer whose tables were made for another grid: resized linearly
        glob = randomize_(WindowedAttention(8, 2, rel_pos_hw=(4, 4))).double().eval()
        torch.testing.assert_close(glob(x, hw=(H, W))[0], _attention_by_hand(glob, x[0], (H, W)))
    vit = VisionTransformer(arch=dict(embed_dims=8, num_layers=2, num_heads=2,
                                      feedforward_channels=16), img_size=(40, 32), patch_size=8,
                            with_cls_token=False, window_size=3, decomposed_rel_pos=True)
    (feat,) = vit(torch.randn(2, 3, 40, 32))
    assert feat.shape == (2, 8, H, W)


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    make = functools.partial(_vitdet, 'relpos-residual', out_indices=(1, 3))
    plain, cp = make().train(), make(with_cp=True).train()
    randomize_(plain)
    cp.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 88, 72)
    grads = []
    for model in (plain, cp):
        sum(o.square().mean() for o in model(x)).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert g is not None and g.abs().max() > 0, name
        torch.testing.assert_close(grads[1][name], g, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize('change,message', [
    (dict(with_cls_token=True), 'window_size, decomposed_rel_pos act on the patch grid alone: '
                                'build the ViT with with_cls_token=False'),
    (dict(num_register_tokens=2), 'with_cls_token=False and num_register_tokens=0'),
    (dict(pos_embed=dict(type='rope')), "pos_embed type 'rope' does not combine with "
                                        'window_size, decomposed_rel_pos'),
    (dict(window_size=0), 'global_attn_indexes names the layers that stay global among '
                          'windowed ones: it needs window_size > 0'),
    (dict(global_attn_indexes=(4,)), 'global_attn_indexes entry 4 out of range for 4 layers'),
    (dict(window_size=-1), 'window_size must be >= 0'),
])
def test_options_that_cannot_work_are_refused(change, message):
    with pytest.raises((ValueError, IndexError), match=message.replace('(', r'\(')
                       .replace(')', r'\)')):
        _sam(**change)


def test_a_subset_of_patches_is_refused():
    vit = _sam()
    tokens, hw = vit.embed(torch.randn(1, 3, SAM_IMG, SAM_IMG))
    with pytest.raises(ValueError, match='need the whole patch grid'):
        vit.encode(tokens, hw, keep=torch.arange(10)[None])
