"""2D rotary position embedding (config type ``rope``): rotations against explicit 2 x 2
rotation matrices, the relative-position property, DINOv3's convention against Hugging
Face's ``DINOv3ViTModel``, build-time errors, any input size, training and MAE's subset."""
import math

import pytest
import torch
import torch.nn.functional as F

from densevit.models.backbones.vit import VisionTransformer
from densevit.models.layers.attention import MultiheadAttention
from densevit.models.layers.rope_2d import RotaryPositionEmbedding2D
from densevit.models.selfsup.masking import random_masking
from densevit.utils.random_init import randomize_

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
VARIANTS = [dict(convention='eva02'), dict(convention='dinov3'),
            dict(convention='eva02', mixed=True), dict(convention='dinov3', mixed=True)]


def variant_id(v):
    return v['convention'] + ('-mixed' if v.get('mixed') else '')


def _vit(pos_embed, **kwargs):
    model = VisionTransformer(**{**dict(arch=TINY, img_size=32, patch_size=8,
                                        pos_embed=pos_embed), **kwargs})
    model.init_weights()
    return model


# ---- the reference: each convention written out from its paper / code, per token and pair

def reference_angle(variant, pe, head, r, c, hw, p, d):
    """Angle of channel pair p (0 .. d/2 - 1) of ``head`` for the patch at row r, column c
    of grid ``hw``, written out per convention (``pe`` only for its pre-training grid and
    RoPE-Mixed's learned frequencies)."""
    (h, w), (h0, w0) = hw, pe.num_patches_hw
    if variant['convention'] == 'eva02':
        # EVA-02: t = arange(ft) / ft * pt; freqs 1 / theta^(arange(0, d/2, 2) / (d/2))
        y, x = r / h * h0, c / w * w0
        theta, two_pi = 1e4, 1.0
    else:
        # DINOv3: patch centres (i + 0.5) / n mapped to [-1, 1]; angles 2 pi * coord * f
        y, x = 2 * (r + 0.5) / h - 1, 2 * (c + 0.5) / w - 1
        theta, two_pi = 100.0, 2 * math.pi
    if variant.get('mixed'):
        f_y, f_x = pe.freqs[head, 0, p].item(), pe.freqs[head, 1, p].item()
        return x * f_x + y * f_y
    quarter = d // 4
    k = p % quarter
    freq = two_pi / theta ** (2 * k / (d / 2))
    return (y if p < quarter else x) * freq  # first half of the pairs: y, second: x


def rotate_by_hand(q, variant, pe, hw, num_extra):
    """q [B, heads, E + h*w, d] float64 -> every pair turned by its explicit 2 x 2 matrix."""
    B, H, N, d = q.shape
    out = q.clone()
    for b in range(B):
        for head in range(H):
            for n in range(num_extra, N):
                r, c = divmod(n - num_extra, hw[1])
                for p in range(d // 2):
                    # EVA-02 pairs neighbours (2p, 2p + 1); DINOv3 rotates half (p, p + d/2)
                    i, j = (2 * p, 2 * p + 1) if variant['convention'] == 'eva02' \
                        else (p, p + d // 2)
                    a = reference_angle(variant, pe, head, r, c, hw, p, d)
                    rot = torch.tensor([[math.cos(a), -math.sin(a)],
                                        [math.sin(a), math.cos(a)]], dtype=torch.float64)
                    out[b, head, n, [i, j]] = rot @ q[b, head, n, [i, j]]
    return out


@pytest.mark.parametrize('variant', VARIANTS, ids=variant_id)
def test_rotation_equals_explicit_2x2_rotations(variant):
    """Grid 2 x 3 against a pre-training grid 4 x 4 (EVA-02 rescales), a class token."""
    torch.manual_seed(0)
    pe = RotaryPositionEmbedding2D((4, 4), 16, 2, num_extra_tokens=1, **variant).double()
    hw = (2, 3)
    q = torch.randn(2, 2, 1 + 6, 8, dtype=torch.float64)
    rotation = pe.rotation(hw, like=q)
    heads = 2 if variant.get('mixed') else 1
    assert rotation.cos.shape == (1, heads, 7, 4) and rotation.cos.dtype == torch.float64
    got = rotation.apply(q)
    torch.testing.assert_close(got, rotate_by_hand(q, variant, pe, hw, 1), rtol=0, atol=1e-12)
    assert torch.equal(got[:, :, 0], q[:, :, 0])  # the class token is not rotated


@pytest.mark.parametrize('variant', VARIANTS[:3], ids=variant_id)
def test_attention_rotates_queries_and_keys_not_values(variant):
    """MultiheadAttention with a rotation = softmax(R q . R k / sqrt(d)) v by hand."""
    torch.manual_seed(1)
    attn = randomize_(MultiheadAttention(16, 2), seed=1).double().eval()
    pe = RotaryPositionEmbedding2D((3, 3), 16, 2, num_extra_tokens=1, **variant).double()
    hw = (3, 2)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    q, k, v = (x @ attn.qkv.weight.t() + attn.qkv.bias).reshape(2, 7, 3, 2, 8).permute(
        2, 0, 3, 1, 4)
    q, k = (rotate_by_hand(t, variant, pe, hw, 1) for t in (q, k))
    weights = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    ref = attn.proj((weights @ v).transpose(1, 2).reshape(2, 7, 16))
    got = attn(x, rope=pe.rotation(hw, like=x))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)


def test_mixed_initialisation_is_heo_et_al():
    """RoPE-Mixed's init (Heo et al. 2024, ``init_random_2d_freqs``): magnitudes
    1 / 10^(4k/d); pair k along a random angle a per head, pair d/4 + k along a + pi/2."""
    torch.manual_seed(3)
    d, heads = 16, 4
    pe = RotaryPositionEmbedding2D((4, 4), d * heads, heads, mixed=True)
    assert pe.theta == 10.0 and pe.freqs.shape == (heads, 2, d // 2)
    f_y, f_x = pe.freqs[:, 0].double(), pe.freqs[:, 1].double()
    mags = torch.tensor([1 / 10 ** (4 * k / d) for k in range(d // 4)], dtype=torch.float64)
    torch.testing.assert_close(torch.hypot(f_x, f_y), mags.repeat(2).expand(heads, -1))
    direction = torch.atan2(f_y, f_x)  # [heads, d/2]
    first, second = direction[:, :d // 4], direction[:, d // 4:]
    assert torch.allclose(first, first[:, :1], atol=1e-5)  # one angle per head
    turn = torch.remainder(second - first, 2 * math.pi)
    torch.testing.assert_close(turn, torch.full_like(turn, math.pi / 2))
    assert len({round(a, 4) for a in first[:, 0].tolist()}) == heads  # heads differ


# ---- the relative-position property

@pytest.mark.parametrize('variant', VARIANTS[:3], ids=variant_id)
def test_logits_depend_only_on_the_offset(variant):
    """One query vector and one key vector placed at every patch of a 4 x 5 grid: after
    RoPE their dot product depends only on (dy, dx) = key place - query place."""
    torch.manual_seed(2)
    hw = (4, 5)
    pe = RotaryPositionEmbedding2D((3, 3), 32, 2, **variant).double()
    q = torch.randn(1, 2, 1, 16, dtype=torch.float64).expand(-1, -1, 20, -1)
    k = torch.randn(1, 2, 1, 16, dtype=torch.float64).expand(-1, -1, 20, -1)
    rotation = pe.rotation(hw, like=q)
    logits = rotation.apply(q) @ rotation.apply(k).transpose(-2, -1)  # [1, heads, 20, 20]
    by_offset = {}
    for i in range(20):
        for j in range(20):
            (r0, c0), (r1, c1) = divmod(i, 5), divmod(j, 5)
            by_offset.setdefault((r1 - r0, c1 - c0), []).append(logits[0, :, i, j])
    for offset, values in by_offset.items():
        for value in values[1:]:
            torch.testing.assert_close(value, values[0], rtol=0, atol=1e-10, msg=str(offset))
    firsts = torch.stack([v[0] for v in by_offset.values()])  # [offsets, heads]
    assert firsts.std(0).min() > 1e-3  # and it does depend on the offset


# ---- DINOv3 against Hugging Face

def _hf_config(layers=1, **kwargs):
    transformers = pytest.importorskip('transformers')
    return transformers.DINOv3ViTConfig(
        hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=layers,
        patch_size=8, image_size=32, num_register_tokens=0, key_bias=True,
        layer_norm_eps=1e-6, **kwargs)


def _grid_of(size, patch=8):
    return size[0] // patch, size[1] // patch


@pytest.mark.parametrize('size', [(32, 32), (48, 80)])
def test_attention_layer_equals_hf_dinov3(size):
    """The same q / k / v / output weights (all random) and tokens: DINOv3ViTAttention with
    HF's rope embedding vs MultiheadAttention with ours, within 1e-5."""
    from transformers.models.dinov3_vit import modeling_dinov3_vit as hf

    cfg = _hf_config()
    hf_attn = randomize_(hf.DINOv3ViTAttention(cfg), seed=4).eval()
    cos, sin = hf.DINOv3ViTRopePositionEmbedding(cfg).eval()(torch.zeros(1, 3, *size))
    ours = MultiheadAttention(32, 2).eval()
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([hf_attn.q_proj.weight, hf_attn.k_proj.weight,
                                         hf_attn.v_proj.weight]))
        ours.qkv.bias.copy_(torch.cat([hf_attn.q_proj.bias, hf_attn.k_proj.bias,
                                       hf_attn.v_proj.bias]))
        ours.proj.load_state_dict(hf_attn.o_proj.state_dict())
    hw = _grid_of(size)
    x = torch.randn(2, 1 + hw[0] * hw[1], 32, generator=torch.Generator().manual_seed(5))
    pe = RotaryPositionEmbedding2D((4, 4), 32, 2, num_extra_tokens=1, convention='dinov3')
    with torch.no_grad():
        ref = hf_attn(x, position_embeddings=(cos, sin))[0]
        got = ours(x, rope=pe.rotation(hw, like=x))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


def _dinov3_to_densevit(hf_model, num_layers):
    """HF DINOv3ViTModel's tensors under densevit ViT names (no register tokens)."""
    src = hf_model.state_dict()
    out = {'cls_token': src['embeddings.cls_token'],
           'patch_embed.proj.weight': src['embeddings.patch_embeddings.weight'],
           'patch_embed.proj.bias': src['embeddings.patch_embeddings.bias'],
           'norm.weight': src['norm.weight'], 'norm.bias': src['norm.bias']}
    for i in range(num_layers):
        a, b = f'model.layer.{i}.', f'blocks.{i}.'
        for part in ('weight', 'bias'):
            out[f'{b}attn.qkv.{part}'] = torch.cat(
                [src[f'{a}attention.{n}_proj.{part}'] for n in 'qkv'])
            out[f'{b}attn.proj.{part}'] = src[f'{a}attention.o_proj.{part}']
            out[f'{b}mlp.fc1.{part}'] = src[f'{a}mlp.up_proj.{part}']
            out[f'{b}mlp.fc2.{part}'] = src[f'{a}mlp.down_proj.{part}']
            for norm in ('norm1', 'norm2'):
                out[f'{b}{norm}.{part}'] = src[f'{a}{norm}.{part}']
    return out


def test_vit_equals_hf_dinov3_model():
    """A 2-layer DINOv3ViTModel, every tensor random but LayerScale (set to 1: densevit's
    ViT has none), copied into a densevit ViT with DINOv3's RoPE: the last hidden state
    (class token and patches, after the final norm) within 1e-5, at the pre-training size
    and at another."""
    transformers = pytest.importorskip('transformers')
    hf_model = randomize_(transformers.DINOv3ViTModel(_hf_config(layers=2)), seed=6).eval()
    for name, p in hf_model.named_parameters():
        if 'layer_scale' in name:
            p.data.fill_(1.0)
    vit = _vit(dict(type='rope', convention='dinov3'), layer_norm_eps=1e-6).eval()
    vit.load_state_dict(_dinov3_to_densevit(hf_model, 2), strict=True)
    for size in [(32, 32), (48, 80)]:
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            ref = hf_model(pixel_values=x).last_hidden_state
            got = vit.forward_visible(x)
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


# ---- build-time errors

def test_build_errors():
    with pytest.raises(ValueError, match='divisible by 4.*got 6'):
        _vit(dict(type='rope'), arch=dict(TINY, embed_dims=24, num_heads=4))
    for placement in ('stem', 'every_layer_shared'):
        with pytest.raises(ValueError, match=f"RoPE rotates queries and keys inside each "
                                             f"attention layer; placement '{placement}'"):
            _vit(dict(type='rope', placement=placement))
    with pytest.raises(ValueError, match="Unknown RoPE convention 'eva03'.*eva02, dinov3"):
        _vit(dict(type='rope', convention='eva03'))
    with pytest.raises(ValueError, match='not offered with mixed=True'):
        _vit(dict(type='rope', mixed=True, convention='dinov3', rescale=2.0))
    with pytest.raises(ValueError, match='jitter must be at least 1'):
        _vit(dict(type='rope', convention='dinov3', jitter=0.5))
    vit = _vit(dict(type='rope', placement='every_layer'))
    assert (vit.pos_embed_type, vit.pos_embed_placement) == ('rope', 'every_layer')
    assert _vit('rope').pos_embed_placement == 'every_layer'


# ---- any input size, training

@pytest.mark.parametrize('variant', VARIANTS[:3], ids=variant_id)
def test_any_input_size(variant):
    """48 x 80 and 64 x 64 inputs (grids 6 x 10 and 8 x 8, the pre-training grid 4 x 4):
    finite maps, and the rotation is that of the input's grid (the reference angles)."""
    vit = _vit(dict(type='rope', **variant)).eval()
    pe = vit.pos_embed[0] if variant.get('mixed') else vit.pos_embed
    for size in [(48, 80), (64, 64)]:
        hw = _grid_of(size)
        with torch.no_grad():
            (out,) = vit(torch.randn(1, 3, *size))
        assert out.shape == (1, 32, *hw) and torch.isfinite(out).all()
        rotation = pe.rotation(hw)
        heads = 2 if variant.get('mixed') else 1
        assert rotation.cos.shape == (1, heads, 1 + hw[0] * hw[1], 8)
        ref = torch.tensor([[[reference_angle(variant, pe, head, *divmod(n, hw[1]), hw, p, 16)
                              for p in range(8)] for n in range(hw[0] * hw[1])]
                            for head in range(heads)])
        torch.testing.assert_close(rotation.cos[0, :, 1:], ref.cos().float(), rtol=0,
                                   atol=1e-5)
        torch.testing.assert_close(rotation.sin[0, :, 1:], ref.sin().float(), rtol=0,
                                   atol=1e-5)


@pytest.mark.parametrize('cls_token', [True, False])
@pytest.mark.parametrize('variant', VARIANTS, ids=variant_id)
def test_vit_trains_forward_backward(variant, cls_token):
    torch.manual_seed(0)
    vit = _vit(dict(type='rope', **variant), with_cls_token=cls_token).train()
    (out,) = vit(torch.randn(2, 3, 40, 24))
    out.square().mean().backward()
    for name, p in vit.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    if variant.get('mixed'):
        assert [n for n, _ in vit.named_parameters() if 'pos_embed' in n] == [
            'pos_embed.0.freqs', 'pos_embed.1.freqs']
        assert all(pe.freqs.grad.abs().sum() > 0 for pe in vit.pos_embed)
    else:
        assert not [n for n, _ in vit.named_parameters() if 'pos_embed' in n]


@pytest.mark.parametrize('variant', VARIANTS[1:3], ids=variant_id)
def test_gradient_checkpointing_gives_the_same_gradients(variant):
    grads = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        vit = _vit(dict(type='rope', **variant), with_cp=with_cp).train()
        (out,) = vit(torch.randn(2, 3, 32, 24, generator=torch.Generator().manual_seed(1)))
        out.square().mean().backward()
        grads.append({n: p.grad for n, p in vit.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, msg=name)


def test_rotation_computed_once_per_forward_unless_mixed(monkeypatch):
    """A fixed RoPE is one module whose rotation every layer shares (DINOv3's coordinate
    noise is then one draw per forward); RoPE-Mixed has one module per layer."""
    calls, rotation = [], RotaryPositionEmbedding2D.rotation

    def counted(self, *args, **kwargs):
        calls.append(self)
        return rotation(self, *args, **kwargs)

    monkeypatch.setattr(RotaryPositionEmbedding2D, 'rotation', counted)
    for mixed, expected in ((False, 1), (True, 3)):
        vit = _vit(dict(type='rope', mixed=mixed), arch=dict(TINY, num_layers=3)).eval()
        calls.clear()
        vit(torch.randn(1, 3, 32, 32))
        assert calls == (list(vit.pos_embed) if mixed else [vit.pos_embed])
        assert len(calls) == expected


def test_dinov3_coordinate_noise_only_in_training():
    """Shift / jitter / rescale (off by default) change the rotation at every call in
    training only; in evaluation the rotation is the plain one."""
    plain = RotaryPositionEmbedding2D((4, 4), 32, 2, convention='dinov3')
    noisy = RotaryPositionEmbedding2D((4, 4), 32, 2, convention='dinov3', shift=0.1,
                                      jitter=1.2, rescale=2.0)
    ref = plain.train().rotation((5, 6)).cos  # no noise asked: training changes nothing
    assert torch.equal(plain.eval().rotation((5, 6)).cos, ref)
    assert torch.equal(noisy.eval().rotation((5, 6)).cos, ref)
    torch.manual_seed(0)
    first, second = (noisy.train().rotation((5, 6)).cos for _ in range(2))
    assert not torch.allclose(first, ref) and not torch.allclose(first, second)


# ---- MAE: a subset of the patches keeps its full-grid rotation

@pytest.mark.parametrize('variant', VARIANTS[1:3], ids=variant_id)
def test_visible_patches_keep_their_full_grid_rotation(variant):
    """``encode(tokens, hw, keep)`` = all tokens with the full grid's rotation, attention
    restricted to the class and kept tokens by a key mask, then the kept rows."""
    vit = _vit(dict(type='rope', **variant), img_size=(32, 40)).eval()
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        tokens, hw = vit.embed(x)
        keep, _ = random_masking(2, hw[0] * hw[1], 0.6, torch.Generator().manual_seed(1))
        out = vit.encode(tokens, hw, keep)
        seq = torch.cat([vit.cls_token.expand(2, -1, -1), tokens], dim=1)
        allowed = torch.zeros(2, seq.shape[1], dtype=torch.bool)
        allowed[:, 0] = True
        allowed.scatter_(1, keep + 1, True)
        mask = torch.zeros(2, 1, 1, seq.shape[1]).masked_fill(~allowed[:, None, None],
                                                              float('-inf'))
        for i, block in enumerate(vit.blocks):
            pe = vit.pos_embed[i] if variant.get('mixed') else vit.pos_embed
            seq = block(seq, attn_mask=mask, rope=pe.rotation(hw))
        seq = vit.norm(seq)
        rows = torch.cat([torch.zeros(2, 1, dtype=torch.long), keep + 1], dim=1)
        ref = torch.stack([seq[b, rows[b]] for b in range(2)])
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('variant', VARIANTS, ids=variant_id)
def test_similarity_picture_by_hand(variant):
    """The RoPE counterpart of ViT Fig. 7's similarity: tile (r, c) at key (k, l) is the
    mean over channel pairs of cos(angle(r, c) - angle(k, l)), the angles written out per
    paper (``reference_angle``); averaged over heads, per head for RoPE-Mixed."""
    from densevit.analysis.pos_embed_similarity import position_similarity

    vit = _vit(dict(type='rope', **variant)).eval()
    res = position_similarity(vit, (3, 4))
    mixed = variant.get('mixed')
    assert [r['name'] for r in res] == (['layer0', 'layer1'] if mixed else ['every_layer'])
    hw, d, heads = (3, 4), 16, 2
    for layer, r in enumerate(res):
        pe = vit.pos_embed[layer] if mixed else vit.pos_embed
        assert r['kind'] == 'rope_similarity' and r['grid'].shape == (3, 4, 3, 4)
        assert ('per_head' in r) == bool(mixed)
        for (a, b), (k, c) in [((0, 0), (0, 0)), ((0, 0), (2, 3)), ((1, 2), (0, 1))]:
            per_head = [sum(math.cos(reference_angle(variant, pe, h, a, b, hw, p, d)
                                     - reference_angle(variant, pe, h, k, c, hw, p, d))
                            for p in range(d // 2)) / (d // 2) for h in range(heads)]
            assert r['grid'][a, b, k, c].item() == pytest.approx(sum(per_head) / heads,
                                                                 abs=1e-5)
            if mixed:
                assert r['per_head'][:, a, b, k, c].tolist() == pytest.approx(per_head,
                                                                              abs=1e-5)


def test_dtype_of_the_angles():
    """Angles in float32 for float32 / bf16 tokens (bf16 angles would be off by whole
    radians), float64 for float64; the rotation is applied in the tokens' dtype."""
    pe = RotaryPositionEmbedding2D((4, 4), 32, 2)
    assert pe.rotation((4, 4), like=torch.zeros(1, dtype=torch.bfloat16)).cos.dtype \
        == torch.float32
    assert pe.rotation((4, 4), like=torch.zeros(1, dtype=torch.float64)).cos.dtype \
        == torch.float64
    with torch.autocast('cpu', dtype=torch.bfloat16):  # no bf16 matmul in the angles
        assert torch.equal(pe.rotation((4, 4), like=torch.zeros(1)).sin,
                           pe.rotation((4, 4)).sin)
    q = torch.randn(1, 2, 16, 16, dtype=torch.bfloat16)
    assert pe.rotation((4, 4)).apply(q).dtype == torch.bfloat16
    assert F.cosine_similarity(pe.rotation((4, 4)).apply(q).float(),
                               pe.rotation((4, 4)).apply(q.float()), dim=-1).min() > 0.99
