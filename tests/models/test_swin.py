"""Swin backbone: sizes, shifted windows vs brute force, any input size, HF equality, loading."""
import logging
import math

import pytest
import torch
import torch.nn.functional as F

from densevit.checkpoint.swin import convert_swin
from densevit.models.backbones.swin import ARCH_SETTINGS, SwinTransformer
from densevit.models.layers.swin_block import PatchMerging, SwinBlock
from densevit.models.layers.window_attention import (
    MASK_VALUE,
    shifted_window_mask,
    window_partition,
    window_token_order,
)
from densevit.registry import MODELS
from densevit.utils.random_init import randomize_

TINY = dict(embed_dims=16, depths=(2, 2), num_heads=(1, 2))


def _tiny(**kwargs):
    cfg = dict(type='SwinTransformer', arch=TINY, window_size=4, out_indices=(0, 1),
               drop_path_rate=0.)
    cfg.update(kwargs)
    return MODELS.build(cfg).eval()


# ---------------------------------------------------------------- sizes
def classifier_params(C, depths, heads, M=7, patch=4, in_channels=3, num_classes=1000):
    """Parameters of the official Swin classifier, from the architecture alone."""
    n = in_channels * patch * patch * C + C + 2 * C  # patch conv + its LayerNorm
    for i, (depth, h) in enumerate(zip(depths, heads, strict=True)):
        d = C * 2 ** i
        block = 12 * d * d + 13 * d + (2 * M - 1) ** 2 * h  # 2 LN, qkv, proj, MLP 4d, bias table
        n += depth * block
        if i < len(depths) - 1:
            n += 8 * d * d + 8 * d  # patch merging: LN(4d) + Linear(4d, 2d, no bias)
    last = C * 2 ** (len(depths) - 1)
    return n + 2 * last + last * num_classes + num_classes  # final LN + head


@pytest.mark.parametrize('arch,published', [('tiny', 28_288_354), ('small', 49_606_258),
                                            ('base', 87_768_224), ('large', 196_532_476)])
def test_param_counts(arch, published):
    """Ours (4 output norms, no head) + ImageNet head - 3 extra norms = the official model."""
    s = ARCH_SETTINGS[arch[0].upper()]
    assert classifier_params(s['embed_dims'], s['depths'], s['num_heads']) == published
    with torch.device('meta'):
        model = SwinTransformer(arch=arch)
    ours = sum(p.numel() for p in model.parameters())
    C = s['embed_dims']
    extra_norms = sum(2 * C * 2 ** i for i in range(3))
    head = 8 * C * 1000 + 1000
    assert ours - extra_norms + head == published
    assert model.out_channels == [C, 2 * C, 4 * C, 8 * C] and model.out_strides == [4, 8, 16, 32]


# ---------------------------------------------------------------- windows and shifts
def _brute_force_window_attention(block, x, hw):
    """Attention over the whole (zero-padded) map, each token allowed only the tokens of
    its own window, computed in image coordinates without any roll or mask."""
    B, _, C = x.shape
    (H, W), M, s = hw, block.window_size, block.shift_size
    Hp, Wp = math.ceil(H / M) * M, math.ceil(W / M) * M
    grid = F.pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H)).reshape(B, Hp * Wp, C)
    ys, xs = torch.meshgrid(torch.arange(Hp), torch.arange(Wp), indexing='ij')
    ys, xs = ys.flatten(), xs.flatten()
    # windows start at rows s, s + M, ...; the s rows above the first would, after the
    # cyclic shift, share the last window but lie across the border: a region of their own
    wy = torch.where(ys < s, -1, (ys - s) // M)
    wx = torch.where(xs < s, -1, (xs - s) // M)
    same = (wy[:, None] == wy[None, :]) & (wx[:, None] == wx[None, :])

    attn = block.attn
    h = attn.num_heads
    q, k, v = attn.qkv(grid).view(B, -1, 3, h, C // h).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-1, -2) / math.sqrt(C // h)  # [B, h, N, N]
    table = attn.relative_position_bias.relative_position_bias_table  # [(2M-1)^2, h]
    dy, dx = ys[:, None] - ys[None, :], xs[:, None] - xs[None, :]
    idx = ((dy + M - 1) * (2 * M - 1) + dx + M - 1).clamp(0, table.shape[0] - 1)
    logits = logits + table[idx].permute(2, 0, 1)
    logits = logits.masked_fill(~same, float('-inf'))
    out = attn.proj((logits.softmax(-1) @ v).transpose(1, 2).reshape(B, -1, C))
    return out.view(B, Hp, Wp, C)[:, :H, :W].reshape(B, H * W, C)


@pytest.mark.parametrize('shift', [False, True])
@pytest.mark.parametrize('hw', [(8, 8), (6, 10), (5, 7)])
def test_window_attention_matches_brute_force(shift, hw):
    torch.manual_seed(0)
    block = SwinBlock(embed_dims=8, num_heads=2, window_size=4, shift=shift).eval()
    torch.nn.init.normal_(block.attn.relative_position_bias.relative_position_bias_table)
    x = torch.randn(2, hw[0] * hw[1], 8)
    M = 4
    padded = (math.ceil(hw[0] / M) * M, math.ceil(hw[1] / M) * M)
    mask = shifted_window_mask(padded, M, M // 2)
    with torch.no_grad():
        ours = block.window_attention(x, hw, mask)
        ref = _brute_force_window_attention(block, x, hw)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('shift', [0, 2])
@pytest.mark.parametrize('hw', [(8, 8), (5, 7)])
def test_window_token_order_is_pad_roll_partition(shift, hw):
    """One gather = zero pad + roll by -shift + partition; the inverse undoes them and crops."""
    M, (H, W) = 4, hw
    Hp, Wp = math.ceil(H / M) * M, math.ceil(W / M) * M
    x = torch.randn(2, H, W, 3)
    padded = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
    order, inverse = window_token_order(hw, M, shift)
    ref = window_partition(torch.roll(padded, shifts=(-shift, -shift), dims=(1, 2)), M)
    windows = padded.reshape(2, Hp * Wp, 3).index_select(1, order).view_as(ref)
    assert torch.equal(windows, ref)
    assert torch.equal(windows.view(2, -1, 3).index_select(1, inverse), x.reshape(2, H * W, 3))


def test_shift_mask_never_joins_wrapped_regions():
    mask = shifted_window_mask((8, 8), 4, 2)  # 4 windows of 16 tokens
    assert mask.shape == (4, 16, 16)
    assert (mask[0] == 0).all()  # the top-left window wraps nothing
    # the bottom-right window holds 4 regions of 2x2 tokens: each sees only its own 4
    assert ((mask[3] == 0).sum(-1) == 4).all() and set(mask.unique().tolist()) == {0, MASK_VALUE}


def test_patch_merging_channel_order():
    merge = PatchMerging(1)
    x = torch.arange(16.).view(1, 16, 1)  # 4x4 map, value = 4 * row + col
    with torch.no_grad():
        merge.norm = torch.nn.Identity()
        merge.reduction = torch.nn.Identity()
        out, hw = merge(x, (4, 4))
    assert hw == (2, 2)
    assert out[0, 0].tolist() == [0., 4., 1., 5.]  # (0,0), (1,0), (0,1), (1,1)


# ---------------------------------------------------------------- any input size
@pytest.mark.parametrize('size', [(37, 53), (224, 224), (3, 5)])
def test_any_input_size(size):
    model = _tiny(arch=dict(embed_dims=8, depths=(2, 2, 2, 2), num_heads=(1, 1, 2, 2)),
                  window_size=7, out_indices=(0, 1, 2, 3))
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    h, w = math.ceil(size[0] / 4), math.ceil(size[1] / 4)
    for i, out in enumerate(outs):
        assert out.shape == (1, 8 * 2 ** i, h, w)
        assert torch.isfinite(out).all()
        h, w = math.ceil(h / 2), math.ceil(w / 2)


@pytest.mark.parametrize('pe', [True, 'learned_2d', dict(type='sincos_2d')])
def test_absolute_position_embedding_types(pe):
    model = _tiny(use_abs_pos_embed=pe, pretrain_img_size=32)
    model.init_weights()
    with torch.no_grad():
        base = model(torch.zeros(1, 3, 40, 48))[0]
        model.absolute_pos_embed = None
        plain = model(torch.zeros(1, 3, 40, 48))[0]
    assert base.shape == (1, 16, 10, 12) and not torch.allclose(base, plain)


@pytest.mark.parametrize('pe', ['relative', dict(type='learned_1d', placement='every_layer')])
def test_absolute_position_embedding_rejects_other_kinds(pe):
    with pytest.raises(ValueError, match='only absolute types'):
        _tiny(use_abs_pos_embed=pe)


def test_frozen_stages_and_checkpointing():
    model = _tiny(frozen_stages=1).train()
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert any(n.startswith('patch_embed.') for n in frozen) and 'norm0.weight' in frozen
    assert any(n.startswith('layers.0.downsample.') for n in frozen)
    assert not any(n.startswith(('layers.1.', 'norm1.')) for n in frozen)
    for m in (model.patch_embed, model.layers[0], model.norm0):  # frozen: eval mode
        assert not any(sub.training for sub in m.modules())
    assert model.layers[1].training and model.norm1.training
    model.eval().train()  # train() freezes again
    assert not model.layers[0].training and model.layers[1].training
    assert not model.layers[0].blocks[0].attn.qkv.weight.requires_grad

    torch.manual_seed(0)
    plain, ckpt = _tiny().train(), _tiny(with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 32, 32)
    for m in (plain, ckpt):
        sum(o.sum() for o in m(x)).backward()
    torch.testing.assert_close(ckpt.layers[0].blocks[1].attn.qkv.weight.grad,
                               plain.layers[0].blocks[1].attn.qkv.weight.grad)


# ---------------------------------------------------------------- Hugging Face equality
@pytest.fixture(scope='module')
def hf_swin_backbone(tmp_path_factory):
    transformers = pytest.importorskip('transformers')
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2],
                                  num_heads=[1, 2], window_size=4, drop_path_rate=0.,
                                  out_features=['stage1', 'stage2'])
    model = randomize_(transformers.SwinBackbone(cfg)).eval()
    path = tmp_path_factory.mktemp('hf_swin')
    model.save_pretrained(path)  # the Hub file layout (attention.self.query ...)
    return model, path / 'model.safetensors', cfg


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_swin_backbone_outputs_match(hf_swin_backbone, source, tmp_path, log_lines):
    """HF ``SwinBackbone`` (always shifted windows, one LayerNorm per output, as ours),
    loaded through init_cfg: its origin keeps ``always_shift=True``."""
    hf, path, _ = hf_swin_backbone
    if source == 'module_state_dict':
        path = tmp_path / 'swin_backbone.pth'
        torch.save(hf.state_dict(), path)
    ours = _tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    ours.init_weights()
    ours.eval()
    assert ours.always_shift
    assert 'Hugging Face SwinBackbone layout' in '\n'.join(m for _, m in log_lines)
    assert not [m for lvl, m in log_lines if lvl >= logging.WARNING]
    for size in [(32, 32), (37, 53), (8, 8)]:  # exact fit, padding at both levels, 1-window maps
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref, out = hf(x).feature_maps, ours(x)
        assert len(out) == len(ref) == 2
        for o, r in zip(out, ref, strict=True):
            torch.testing.assert_close(o, r, atol=1e-4, rtol=0)


@pytest.mark.parametrize('size', [(40, 48), (32, 32), (37, 53)])
def test_hf_swin_model_matches(hf_swin_backbone, tmp_path, size, log_lines):
    """HF ``SwinModel``: its one final layernorm becomes ``norm1`` (the last stage's), and
    its origin gives ``always_shift=False``: a stage whose map's shorter side is no longer
    than the window is not shifted; the config says so (a file never changes the model).
    (32, 32) is the 224-pixel case in small: the last map 4x4 equals the 4x4 window;
    (40, 48) maps 10x12 then 5x6, larger; (37, 53) 10x14 then 5x7, padded. SwinModel
    remembers a turned-off shift, so each size gets a fresh copy.
    """
    transformers = pytest.importorskip('transformers')
    _, _, cfg = hf_swin_backbone
    hf = randomize_(transformers.SwinModel(cfg, add_pooling_layer=False), seed=1).eval()
    hf.save_pretrained(tmp_path)
    ours = _tiny(always_shift=False,
                 init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'model.safetensors')))
    ours.init_weights()
    ours.eval()
    assert not [m for lvl, m in log_lines if lvl >= logging.WARNING]
    assert any('norm0.weight' in m and 'expected' in m for _, m in log_lines)  # new in a backbone
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        ref = hf(pixel_values=x).last_hidden_state  # [2, h*w, 32]
        last = ours(x)[-1].flatten(2).transpose(1, 2)
        torch.testing.assert_close(last, ref, atol=1e-4, rtol=0)
        ours.always_shift = True  # what densevit did before: far off at 32x32 only
        diff = (ours(x)[-1].flatten(2).transpose(1, 2) - ref).abs().max()
    assert diff > 0.05 if size == (32, 32) else diff < 1e-4


# ---------------------------------------------------------------- other layouts, loading
def _official_state_dict(model, window=None):
    """densevit Swin weights in the official layout (as swin_tiny_patch4_window7_224.pth)."""
    sd = {}
    last = len(model.layers) - 1
    for k, v in model.state_dict().items():
        if k.startswith('norm') and k[4].isdigit():
            if int(k[4]) == last:
                sd['norm' + k[5:]] = v
            continue
        sd[k.replace('attn.relative_position_bias.', 'attn.')] = v
    for k in [k for k in sd if k.endswith('relative_position_bias_table')]:
        sd[k.replace('_bias_table', '_index')] = torch.zeros(16, 16, dtype=torch.long)
    sd['head.weight'], sd['head.bias'] = torch.zeros(1000, 32), torch.zeros(1000)
    return sd


def test_timm_layout_moves_patch_merging():
    src = _tiny()
    sd = _official_state_dict(src)
    timm = {k.replace('layers.0.downsample', 'layers.1.downsample'): v for k, v in sd.items()}
    timm['head.fc.weight'] = timm.pop('head.weight')
    for layout in (sd, timm):
        out = convert_swin(layout, strict=True)
        assert 'layers.0.downsample.reduction.weight' in out and 'norm1.weight' in out


def test_init_cfg_pretrained_official_other_window(tmp_path, log_lines):
    """A window-7 official checkpoint with an absolute table for 56x56 loads into a
    window-4 model via init_cfg: tables resized, the missing norm0 reported as expected."""
    src = _tiny(window_size=7, use_abs_pos_embed=True, pretrain_img_size=224)
    randomize_(src)
    path = tmp_path / 'swin_official.pth'
    torch.save({'model': _official_state_dict(src)}, path)

    dst = _tiny(window_size=4, use_abs_pos_embed=True, pretrain_img_size=32,
                always_shift=False, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    dst.init_weights()
    torch.testing.assert_close(dst.layers[1].blocks[1].mlp.fc2.weight,
                               src.layers[1].blocks[1].mlp.fc2.weight)
    torch.testing.assert_close(dst.norm1.weight, src.norm1.weight)
    table = dst.layers[0].blocks[0].attn.relative_position_bias.relative_position_bias_table
    assert table.shape == (49, 1)
    text = '\n'.join(m for _, m in log_lines)
    assert 'from grid 7x7 to 4x4' in text and 'from 56x56 to 8x8' in text
    assert not [m for lvl, m in log_lines if lvl >= logging.WARNING]  # always_shift agrees
    assert any('norm0.weight' in m and 'expected' in m for _, m in log_lines)


@pytest.mark.parametrize('layout', ['official', 'timm', 'densevit'])
def test_layouts_reproduce_the_source_model(tmp_path, layout):
    """Random weights (non-zero bias tables, biases, norms) saved in each layout load back
    into the same outputs, 1-window maps included, with the source's always_shift in the
    config (a classifier's file and a config left at True: one line names both)."""
    src = randomize_(_tiny(always_shift=layout == 'densevit'), seed=2)
    sd = _official_state_dict(src) if layout != 'densevit' else src.state_dict()
    if layout == 'timm':
        sd = {k.replace('layers.0.downsample', 'layers.1.downsample'): v for k, v in sd.items()}
        sd['head.fc.weight'] = sd.pop('head.weight')
    torch.save(sd, tmp_path / 'swin.pth')
    dst = _tiny(always_shift=layout == 'densevit',
                init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'swin.pth')))
    dst.init_weights()
    dst.eval()
    if layout != 'densevit':  # the classifier's file has no norm0: give it the source's
        dst.norm0.load_state_dict(src.norm0.state_dict())
    for size in [(32, 32), (37, 53), (16, 16)]:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            for o, r in zip(dst(x), src(x), strict=True):
                torch.testing.assert_close(o, r, atol=1e-5, rtol=0)


def test_a_classifier_checkpoint_never_changes_the_shift_rule(tmp_path, log_lines):
    """The default always_shift=True is kept with an official (classifier) file; one
    WARNING line names the file's rule and the config's."""
    sd = _official_state_dict(_tiny())
    torch.save({'model': sd}, tmp_path / 'official.pth')
    model = _tiny(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'official.pth')))
    model.init_weights()
    assert model.always_shift and model.layers[1].blocks[1].always_shift
    (line,) = [m for lvl, m in log_lines if lvl == logging.WARNING and 'was built with' in m]
    assert ('its origin (official Swin) was built with always_shift=False; this model keeps '
            'always_shift=True from its config') in line


def test_init_cfg_pretrained_reports_missing_loudly(tmp_path, log_lines):
    sd = _official_state_dict(_tiny())
    del sd['layers.1.blocks.0.mlp.fc1.weight']
    sd['layers.1.blocks.0.mlp.fc3.weight'] = torch.zeros(1)
    path = tmp_path / 'broken.pth'
    torch.save(sd, path)
    _tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path))).init_weights()
    warnings = [m for lvl, m in log_lines if lvl >= logging.WARNING]
    assert any('MISSING' in m and 'layers.1.blocks.0.mlp.fc1.weight' in m for m in warnings)
    assert any('UNEXPECTED' in m and 'mlp.fc3.weight' in m for m in warnings)


def test_unknown_layout_is_an_error_listing_keys():
    sd = {'backbone.0.body.conv1.weight': torch.zeros(1), 'class_embed.weight': torch.zeros(1)}
    with pytest.raises(ValueError, match=r'match no known layout.*backbone\.0\.body\.conv1'):
        convert_swin(sd)


def test_detr_swin_config_builds():
    from pathlib import Path

    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    cfg = Config.fromfile(Path(__file__).resolve().parents[2] / 'configs' / 'detr_swin-t.py')
    assert cfg.model.backbone.init_cfg.checkpoint == 'checkpoints/swin_tiny_patch4_window7_224.pth'
    with DefaultScope.overwrite_default_scope('densevit'), torch.device('meta'):
        model = MODELS.build(cfg.model)  # no memory, no init: stays instant
    assert isinstance(model.backbone, SwinTransformer)
    assert model.backbone.out_channels == [768] and model.backbone.out_strides == [32]
    assert model.bbox_head.input_proj.in_channels == 768
