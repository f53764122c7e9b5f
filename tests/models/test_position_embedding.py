"""The position-embedding family (ViT paper App. D.4): types x placements in a tiny ViT,
structure of each table, resizing, relative bias vs a hand-written attention loop."""
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.models.backbones.vit import VisionTransformer
from densevit.models.heads.detr_head import DETRHead
from densevit.models.layers.attention import MultiheadAttention
from densevit.models.layers.pos_embed import LearnedPositionEmbedding
from densevit.models.layers.pos_embed_2d import (
    Learned2DPositionEmbedding,
    SinCos2DPositionEmbedding,
)
from densevit.models.layers.pos_embed_builder import (
    POSITION_EMBEDDING_TYPES,
    build_position_embedding,
    parse_position_embedding_cfg,
)
from densevit.models.layers.relative_position import (
    RelativePositionBias,
    resize_relative_position_table,
)
from densevit.models.layers.rope_2d import RotaryPositionEmbedding2D
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT

TINY = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
COMBOS = [('none', None)] + [(t, p) for t in ('learned_1d', 'learned_2d', 'sincos_2d')
                             for p in ('stem', 'every_layer', 'every_layer_shared')] + \
         [('relative', 'every_layer'), ('relative', 'every_layer_shared'),
          ('rope', 'every_layer')]


def _vit(pos_embed=DEFAULT, **kwargs):
    """A tiny ViT; ``pos_embed`` left out is VisionTransformer's default
    (``dict(type='learned_1d', placement='stem')``)."""
    cfg = dict(arch=TINY, img_size=16, patch_size=4, pos_embed=pos_embed)
    cfg.update(kwargs)
    model = VisionTransformer(**cfg)
    model.init_weights()
    return model


def _pe_params(model):
    return {n: p for n, p in model.named_parameters() if n.startswith('pos_embed')}


@pytest.mark.parametrize('cls_token', [True, False])
@pytest.mark.parametrize('pe_type,placement', COMBOS)
def test_every_type_and_placement_trains_at_two_resolutions(pe_type, placement, cls_token):
    torch.manual_seed(0)
    model = _vit(dict(type=pe_type, placement=placement), with_cls_token=cls_token).train()
    assert model.pos_embed_type == pe_type and model.pos_embed_placement == placement
    for hw, grid in (((16, 16), (4, 4)), ((24, 12), (6, 3))):  # table made for 4x4: resized
        model.zero_grad()
        (out,) = model(torch.randn(2, 3, *hw))
        assert out.shape == (2, 16, *grid)
        out.square().mean().backward()
        for name, p in _pe_params(model).items():
            assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize('pe_type', ['learned_1d', 'learned_2d', 'relative'])
def test_number_of_tables_per_placement(pe_type):
    one = sum(p.numel() for p in _pe_params(_vit(dict(type=pe_type,
                                                      placement='every_layer_shared'))).values())
    per_layer = _vit(dict(type=pe_type, placement='every_layer'))
    assert len(per_layer.pos_embed) == TINY['num_layers']
    assert sum(p.numel() for p in _pe_params(per_layer).values()) == TINY['num_layers'] * one
    if pe_type != 'relative':
        stem = _vit(dict(type=pe_type, placement='stem'))
        assert sum(p.numel() for p in _pe_params(stem).values()) == one
    assert not _pe_params(_vit('none')) and not _pe_params(_vit('sincos_2d'))


def test_placement_changes_the_function():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    stem = _vit(dict(type='learned_1d', placement='stem')).eval()
    shared = _vit(dict(type='learned_1d', placement='every_layer_shared')).eval()
    shared.load_state_dict(stem.state_dict())  # same keys: one table
    with torch.no_grad():
        assert not torch.allclose(stem(x)[0], shared(x)[0])
        # Shared placement = adding the stem table again before layer 1.
        tokens, hw = stem.patch_embed(x)
        tokens = torch.cat([stem.cls_token, tokens], 1)
        table = stem.pos_embed.table(hw)
        for blk in stem.blocks:
            tokens = blk(tokens + table)
        ref = stem.norm(tokens)[:, 1:].transpose(1, 2).reshape(1, 16, 4, 4)
        torch.testing.assert_close(shared(x)[0], ref)


def test_a_fixed_table_is_the_same_model_shared_or_per_layer():
    """sin-cos 2D (no parameters) before every layer: per layer and shared build the same
    model, the same parameters from the same seed and the same outputs and gradients -- why
    the study may read the two cells as one run."""
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    outs, grads = [], []
    for placement in ('every_layer', 'every_layer_shared'):
        torch.manual_seed(0)
        model = _vit(dict(type='sincos_2d', placement=placement)).train()
        (out,) = model(x)
        out.square().mean().backward()
        outs.append(out)
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert torch.equal(outs[0], outs[1])
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])


def test_default_is_the_plain_vit():
    """The default model is unchanged: same keys, and outputs equal a written-out ViT."""
    torch.manual_seed(0)
    model = _vit(pos_embed=dict(type='learned_1d', placement='stem')).eval()
    default = VisionTransformer(arch=TINY, img_size=16, patch_size=4).eval()
    assert list(default.state_dict()) == list(model.state_dict())
    assert isinstance(default.pos_embed, LearnedPositionEmbedding)
    default.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 20, 12)
    with torch.no_grad():
        tokens, hw = model.patch_embed(x)
        tokens = torch.cat([model.cls_token.expand(2, -1, -1), tokens], 1)
        tokens = tokens + model.pos_embed.table(hw)
        for blk in model.blocks:
            tokens = blk(tokens)
        ref = model.norm(tokens)[:, 1:].transpose(1, 2).reshape(2, 16, *hw)
        assert torch.equal(default(x)[0], ref)
        assert torch.equal(model(x)[0], ref)


def test_learned_2d_structure_and_resize():
    torch.manual_seed(0)
    pe = Learned2DPositionEmbedding((3, 4), 8, num_extra_tokens=1)
    pe.init_weights()
    table = pe.table((3, 4))[0]
    assert table.shape == (1 + 12, 8)
    torch.testing.assert_close(table[0], pe.extra_embed[0, 0])
    grid = table[1:].reshape(3, 4, 8)  # [row, col, D]
    for r in range(3):
        for c in range(4):
            assert torch.equal(grid[r, c, :4], pe.x_embed[c])  # same column -> same x half
            assert torch.equal(grid[r, c, 4:], pe.y_embed[r])  # same row -> same y half
    # Resizing each axis table = bicubic resizing of the whole 2D grid.
    full = grid.permute(2, 0, 1)[None]
    ref = F.interpolate(full, size=(5, 7), mode='bicubic', align_corners=False)
    out = pe.table((5, 7))[0, 1:].reshape(5, 7, 8).permute(2, 0, 1)[None]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match='divisible by 2'):
        Learned2DPositionEmbedding((2, 2), 7)


def test_learned_2d_loads_any_grid():
    src = Learned2DPositionEmbedding((2, 5), 8)
    src.init_weights()
    dst = Learned2DPositionEmbedding((3, 3), 8)
    dst.load_state_dict(src.state_dict())
    torch.testing.assert_close(dst.table((3, 3)), src.table((3, 3)))


def test_sincos_2d_matches_formula():
    pe = SinCos2DPositionEmbedding((2, 3), 8, num_extra_tokens=1)
    assert not list(pe.parameters()) and not pe.state_dict()
    table = pe.table((2, 3))[0]
    assert torch.equal(table[0], torch.zeros(8))  # class token: zeros
    omega = [1.0, 1.0 / 10000 ** 0.5]  # D/4 = 2 frequencies: 1 / 10000^(k / 2)
    for r in range(2):
        for c in range(3):
            expect = ([math.sin(c * w) for w in omega] + [math.cos(c * w) for w in omega]
                      + [math.sin(r * w) for w in omega] + [math.cos(r * w) for w in omega])
            torch.testing.assert_close(table[1 + r * 3 + c], torch.tensor(expect))
    # Other grids are computed, not interpolated: a patch keeps its code.
    big = pe.table((4, 5))[0, 1:].reshape(4, 5, 8)
    torch.testing.assert_close(big[:2, :3].reshape(6, 8), table[1:])
    with pytest.raises(ValueError, match='divisible by 4'):
        SinCos2DPositionEmbedding((2, 2), 6)


def _reference_relative_attention(attn, rel, x, hw):
    """softmax(q.k / sqrt(d) + B[dy, dx]) v, one (query, key) pair at a time."""
    B, N, D = x.shape
    H, d, E = attn.num_heads, attn.head_dims, rel.num_extra_tokens
    h, w = hw
    q, k, v = (x @ attn.qkv.weight.t() + attn.qkv.bias).split(D, dim=-1)
    q, k, v = (t.reshape(B, N, H, d) for t in (q, k, v))
    table, extra = rel.relative_position_bias_table, rel.extra_token_table
    out = torch.zeros(B, N, H, d)
    for b in range(B):
        for head in range(H):
            for i in range(N):
                logits = torch.zeros(N)
                for j in range(N):
                    if i < E and j < E:
                        bias = extra[2, head]
                    elif i < E:
                        bias = extra[0, head]
                    elif j < E:
                        bias = extra[1, head]
                    else:
                        (ri, ci), (rj, cj) = divmod(i - E, w), divmod(j - E, w)
                        bias = table[(ri - rj + h - 1) * (2 * w - 1) + (ci - cj + w - 1), head]
                    logits[j] = q[b, i, head] @ k[b, j, head] / math.sqrt(d) + bias
                out[b, i, head] = logits.softmax(0) @ v[b, :, head]
    return out.reshape(B, N, D) @ attn.proj.weight.t() + attn.proj.bias


@pytest.mark.parametrize('extra', [0, 1])
def test_relative_bias_matches_explicit_loop(extra):
    torch.manual_seed(0)
    hw = (2, 3)
    attn = MultiheadAttention(8, 2).eval()
    rel = RelativePositionBias(hw, num_heads=2, num_extra_tokens=extra)
    rel.init_weights()
    with torch.no_grad():
        rel.relative_position_bias_table.normal_()  # large enough to matter
        x = torch.randn(2, extra + 6, 8)
        ours = attn(x, attn_mask=rel(hw))
        ref = _reference_relative_attention(attn, rel, x, hw)
    assert (ours - ref).abs().max() < 1e-5


def test_relative_bias_zero_for_extra_tokens_and_shape():
    rel = RelativePositionBias((2, 2), num_heads=3, num_extra_tokens=2, extra_token_bias='zero')
    rel.init_weights()
    bias = rel.bias((3, 2))
    assert bias.shape == (1, 3, 2 + 6, 2 + 6)
    assert torch.equal(bias[:, :, :2], torch.zeros(1, 3, 2, 8))
    assert torch.equal(bias[:, :, :, :2], torch.zeros(1, 3, 8, 2))
    with pytest.raises(ValueError, match='extra_token_bias'):
        RelativePositionBias((2, 2), 2, extra_token_bias='bogus')


def test_relative_table_resize():
    table = torch.randn(5 * 7, 4)
    assert resize_relative_position_table(table, (3, 4), (3, 4)) is table
    const = torch.full((5 * 7, 4), 0.3)
    out = resize_relative_position_table(const, (3, 4), (5, 2))
    assert out.shape == (9 * 3, 4)
    torch.testing.assert_close(out, torch.full_like(out, 0.3))
    # The zero offset stays the zero offset.
    img = torch.zeros(1, 4, 5, 7)
    img[..., 2, 3] = 1.0
    peaked = img.reshape(4, -1).t()
    out = resize_relative_position_table(peaked, (3, 4), (5, 5)).t().reshape(4, 9, 9)
    assert all(divmod(int(o.argmax()), 9) == (4, 4) for o in out)


def test_relative_table_loads_from_another_square_grid():
    src = RelativePositionBias((3, 3), 2)
    src.init_weights()
    dst = RelativePositionBias((2, 2), 2)
    dst.load_state_dict(src.state_dict())
    torch.testing.assert_close(dst.relative_position_bias_table,
                               resize_relative_position_table(src.relative_position_bias_table,
                                                              (3, 3), (2, 2)))


def test_unresizable_tables_raise_clearly():
    rect = LearnedPositionEmbedding((3, 4), 8, num_extra_tokens=1)  # 12 rows: grid unknown
    with pytest.raises(ValueError, match='cannot resize'):
        LearnedPositionEmbedding((2, 2), 8, num_extra_tokens=1).load_state_dict(rect.state_dict())
    rect = RelativePositionBias((2, 3), 2)  # 3 x 5 offsets: not (2s-1)^2
    with pytest.raises(ValueError, match='cannot resize'):
        RelativePositionBias((2, 2), 2).load_state_dict(rect.state_dict())


def test_bad_configs_raise_clearly():
    with pytest.raises(ValueError, match='learned_2d.*sincos_2d.*relative'):
        _vit(dict(type='learned_3d'))
    with pytest.raises(ValueError, match='every_layer_shared'):
        _vit(dict(type='learned_1d', placement='everywhere'))
    with pytest.raises(ValueError, match='cannot be placed at the stem'):
        _vit(dict(type='relative', placement='stem'))
    with pytest.raises(ValueError, match='sincos_2d'):
        _vit(dict(type='sine_2d'))
    assert parse_position_embedding_cfg(dict(type='relative'))[1] == 'every_layer'
    assert parse_position_embedding_cfg('learned_2d')[:2] == ('learned_2d', 'stem')
    assert parse_position_embedding_cfg(None)[0] == 'none'
    assert set(POSITION_EMBEDDING_TYPES) == {'none', 'learned_1d', 'learned_2d', 'sincos_2d',
                                             'relative', 'rope', 'sine_2d'}


def test_frozen_stages_take_each_layers_table():
    model = _vit(dict(type='learned_2d', placement='every_layer'), frozen_stages=1).train()
    assert not any(p.requires_grad for p in model.pos_embed[0].parameters())
    assert all(p.requires_grad for p in model.pos_embed[1].parameters())
    shared = _vit(dict(type='relative', placement='every_layer_shared'), frozen_stages=0)
    assert not any(p.requires_grad for p in shared.pos_embed.parameters())


def test_sine_2d_is_detrs_encoding():
    pe = build_position_embedding(dict(type='sine_2d', temperature=20), embed_dims=16)
    assert isinstance(pe, SinePositionalEncoding2D) and pe.num_feats == 8
    mask = torch.zeros(1, 3, 4, dtype=torch.bool)
    ref = SinePositionalEncoding2D(num_feats=8, temperature=20)(mask)
    assert torch.equal(pe(mask), ref)
    head = DETRHead(num_classes=2, in_channels=4, embed_dims=16, num_queries=3,
                    transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                     feedforward_channels=16))
    assert isinstance(head.positional_encoding, SinePositionalEncoding2D)
    with pytest.raises(ValueError, match='sine_2d'):
        DETRHead(num_classes=2, in_channels=4, embed_dims=16,
                 positional_encoding=dict(type='learned_1d'))


CONFIG_DIR = Path(__file__).parents[2] / 'configs' / 'studies' / 'vit_pe'


@pytest.mark.parametrize('path', sorted(CONFIG_DIR.glob('*.py')), ids=lambda p: p.stem)
def test_vit_pe_configs_build_what_their_name_says(path):
    cfg = Config.fromfile(str(path))
    with DefaultScope.overwrite_default_scope('densevit'):
        backbone = MODELS.build(cfg.model.backbone)
    name = path.stem.split('_pe-', 1)[1]  # e.g. 'learned_2d-every_layer_shared'
    kind = backbone.pos_embed_type
    if kind == 'rope':  # RoPE's variants: 'rope_dinov3', 'rope_mixed' (EVA-02's plain: 'rope')
        rope = next(m for m in backbone.modules() if isinstance(m, RotaryPositionEmbedding2D))
        kind += '_dinov3' * (rope.convention == 'dinov3') + '_mixed' * (rope.freqs is not None)
    assert '-'.join(filter(None, (kind, backbone.pos_embed_placement))) == name


def test_vit_pe_configs_cover_the_study():
    names = {p.stem.split('_pe-', 1)[1] for p in CONFIG_DIR.glob('*.py')}
    assert names == {'-'.join(filter(None, c)) for c in COMBOS} | {
        'rope_dinov3-every_layer', 'rope_mixed-every_layer'}
