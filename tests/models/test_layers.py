"""Tests for the ViT building blocks: patch embedding, attention, drop path, PE resizing."""
import math

import pytest
import torch
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath

from densevit.models.layers.attention import MultiheadAttention
from densevit.models.layers.patch_embed import PatchEmbed
from densevit.models.layers.pos_embed import LearnedPositionEmbedding, resize_pos_embed
from densevit.models.layers.vit_block import TransformerEncoderLayer


@pytest.mark.parametrize('patch', [4, 7, 16])
def test_patch_embed_shapes(patch):
    pe = PatchEmbed(3, 8, patch, norm_cfg=dict(type='LN'))
    tokens, hw = pe(torch.randn(2, 3, 2 * patch, 3 * patch))
    assert hw == (2, 3)
    assert tokens.shape == (2, 6, 8)


def test_patch_embed_is_patch_linear():
    """The conv equals one Linear applied to each flattened patch (ViT Eq. 1)."""
    torch.manual_seed(0)
    pe = PatchEmbed(2, 5, 4)
    x = torch.randn(1, 2, 8, 12)
    tokens, (h, w) = pe(x)
    patches = x.unfold(2, 4, 4).unfold(3, 4, 4)  # [1, C, h, w, 4, 4]
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(1, h * w, -1)
    expected = patches @ pe.proj.weight.reshape(5, -1).t() + pe.proj.bias
    torch.testing.assert_close(tokens, expected, atol=1e-5, rtol=1e-5)


def test_patch_embed_rejects_non_multiple():
    pe = PatchEmbed(3, 8, 16)
    with pytest.raises(ValueError, match=r'\(30, 32\).*16'):
        pe(torch.randn(1, 3, 30, 32))


def _reference_attention(attn, x, mask=None):
    """softmax(Q K^T / sqrt(d) + mask) V written out by hand."""
    B, N, D = x.shape
    h, d = attn.num_heads, attn.head_dims
    q, k, v = (x @ attn.qkv.weight.t() + attn.qkv.bias).split(D, dim=-1)
    q, k, v = (t.reshape(B, N, h, d).transpose(1, 2) for t in (q, k, v))
    logits = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        logits = logits + mask
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(B, N, D)
    return out @ attn.proj.weight.t() + attn.proj.bias


def test_attention_matches_reference():
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    mask = torch.randn(4, 7, 7)  # a float bias per head, like relative position bias
    with torch.no_grad():
        assert (attn(x) - _reference_attention(attn, x)).abs().max() < 1e-5
        assert (attn(x, attn_mask=mask) - _reference_attention(attn, x, mask)).abs().max() < 1e-5


def test_attention_long_sequence_copies_qkv_and_matches_reference():
    """From CONTIGUOUS_QKV_MIN_TOKENS tokens on (CPU), q, k, v are copied before SDPA."""
    from densevit.models.layers.attention import CONTIGUOUS_QKV_MIN_TOKENS
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 2).eval()
    x = torch.randn(2, CONTIGUOUS_QKV_MIN_TOKENS + 3, 16)
    mask = torch.randn(2, x.shape[1], x.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(attn(x, attn_mask=mask), _reference_attention(attn, x, mask),
                                   atol=1e-5, rtol=1e-5)


def test_attention_dropout_only_in_training():
    torch.manual_seed(0)
    attn = MultiheadAttention(8, 2, attn_drop=0.5)
    x = torch.randn(1, 5, 8)
    attn.eval()
    with torch.no_grad():
        torch.testing.assert_close(attn(x), attn(x))
        attn.train()
        assert not torch.allclose(attn(x), attn(x))


def test_attention_rejects_bad_heads():
    with pytest.raises(ValueError):
        MultiheadAttention(10, 3)


def test_encoder_layer_keys_and_shape():
    layer = TransformerEncoderLayer(8, 2, feedforward_channels=12)
    keys = set(layer.state_dict())
    for k in ('norm1.weight', 'attn.qkv.weight', 'attn.proj.bias', 'norm2.bias',
              'mlp.fc1.weight', 'mlp.fc2.bias'):
        assert k in keys
    assert layer.mlp.fc1.out_features == 12
    assert layer.norm1.eps == 1e-6
    assert TransformerEncoderLayer(8, 2).mlp.fc1.out_features == 32  # mlp_ratio 4
    assert layer(torch.randn(2, 5, 8)).shape == (2, 5, 8)


def test_drop_path_eval_identity_and_train_scaling():
    torch.manual_seed(0)
    dp = DropPath(0.25)
    x = torch.ones(4000, 3, 2)
    dp.eval()
    assert torch.equal(dp(x), x)
    dp.train()
    y = dp(x)
    # Each sample is either zeroed entirely or scaled by 1 / keep_prob.
    per_sample = y.reshape(4000, -1)
    kept = per_sample[:, 0] != 0
    assert torch.all(per_sample[kept] == 1 / 0.75)
    assert torch.all(per_sample[~kept] == 0)
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    assert abs(y.mean().item() - 1.0) < 0.05  # unbiased in expectation


def test_resize_pos_embed_identity_and_constant():
    table = torch.randn(1, 1 + 3 * 4, 6)
    assert resize_pos_embed(table, (3, 4), (3, 4), 1) is table
    const = torch.full((1, 1 + 3 * 4, 6), 0.7)
    out = resize_pos_embed(const, (3, 4), (5, 9), 1)
    assert out.shape == (1, 1 + 5 * 9, 6)
    torch.testing.assert_close(out, torch.full_like(out, 0.7))


def test_resize_pos_embed_matches_interpolate_and_keeps_extra():
    torch.manual_seed(0)
    h0, w0, h1, w1, D, E = 4, 5, 7, 3, 6, 2
    table = torch.randn(1, E + h0 * w0, D)
    out = resize_pos_embed(table, (h0, w0), (h1, w1), E)
    assert torch.equal(out[:, :E], table[:, :E])
    grid = table[:, E:].reshape(1, h0, w0, D).permute(0, 3, 1, 2)
    ref = F.interpolate(grid, size=(h1, w1), mode='bicubic', align_corners=False)
    torch.testing.assert_close(out[:, E:], ref.flatten(2).transpose(1, 2))
    # Row-major layout survives: a table varying only along x still does after resizing.
    ramp = torch.arange(w0, dtype=torch.float).repeat(h0).reshape(1, h0 * w0, 1)
    grid_out = resize_pos_embed(ramp, (h0, w0), (h1, 2 * w0), 0).reshape(h1, 2 * w0)
    torch.testing.assert_close(grid_out, grid_out[:1].expand(h1, -1))
    assert torch.all(grid_out[0, 1:] >= grid_out[0, :-1])


def test_resize_pos_embed_checks_rows():
    with pytest.raises(ValueError):
        resize_pos_embed(torch.zeros(1, 10, 4), (3, 3), (4, 4), 0)


def test_learned_position_embedding_forward_and_load_resize():
    pe = LearnedPositionEmbedding((2, 3), 4, num_extra_tokens=1)
    pe.init_weights()
    tokens = torch.zeros(2, 1 + 4 * 5, 4)
    out = pe(tokens, (4, 5))
    assert out.shape == tokens.shape
    torch.testing.assert_close(out[0], pe.table((4, 5))[0])
    # A square table made for another grid is resized on load.
    target = LearnedPositionEmbedding((3, 3), 4, num_extra_tokens=1)
    big = LearnedPositionEmbedding((4, 4), 4, num_extra_tokens=1)
    big.init_weights()
    target.load_state_dict({'weight': big.weight.detach()})
    torch.testing.assert_close(target.weight, big.table((3, 3)))
