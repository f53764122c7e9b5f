"""DINOv2's ViT options, checked by hand: register tokens, LayerScale, SwiGLU, patch 14 and
inputs that do not tile into patches (equality with Hugging Face: tests/checkpoint/
test_convert_dinov2.py)."""
import pytest
import torch
import torch.nn.functional as F

from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import VisionTransformer
from densevit.models.layers.swiglu import SwiGLU, swiglu_hidden_dims
from densevit.models.layers.vit_block import TransformerEncoderLayer
from densevit.utils.random_init import randomize_

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
R = 3  # register tokens

# every position-embedding type and placement the ViT offers
POSITIONS = [
    'none', dict(type='learned_1d'), dict(type='learned_1d', placement='every_layer'),
    dict(type='learned_2d', placement='every_layer_shared'), dict(type='sincos_2d'),
    dict(type='relative'), dict(type='relative', extra_token_bias='zero'),
    dict(type='rope'), dict(type='rope', convention='dinov3'), dict(type='rope', mixed=True),
]


def _vit(**kwargs):
    kwargs = dict(dict(arch=TINY, img_size=32, patch_size=8), **kwargs)
    return randomize_(VisionTransformer(**kwargs)).eval()


def _first_block_input(vit, x):
    """What layer 0 receives: [B, E + h*w, D]."""
    seen = []
    handle = vit.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    with torch.no_grad():
        vit(x)
    handle.remove()
    return seen[0]


def test_registers_follow_the_class_token_without_position_and_leave_the_maps():
    vit = _vit(num_register_tokens=R)
    assert vit.num_extra_tokens == 1 + R and vit.register_tokens.shape == (1, R, 32)
    assert vit.pos_embed.weight.shape == (1, 1 + 16, 32)  # rows: the class token, the grid
    x = torch.randn(2, 3, 32, 32)
    tokens, _ = vit.embed(x)
    seq = _first_block_input(vit, x)
    table = vit.pos_embed.weight
    torch.testing.assert_close(seq[:, 0], (vit.cls_token + table[:, :1])[:, 0].expand(2, -1))
    torch.testing.assert_close(seq[:, 1:1 + R], vit.register_tokens.expand(2, -1, -1))  # as is
    torch.testing.assert_close(seq[:, 1 + R:], tokens + table[:, 1:])
    with torch.no_grad():
        (out,) = vit(x)
        last = vit.forward_visible(x)  # [B, 1 + R + 16, D]
    assert out.shape == (2, 32, 4, 4)
    torch.testing.assert_close(out, last[:, 1 + R:].transpose(1, 2).reshape(2, 32, 4, 4))
    with torch.no_grad():  # the registers take part in attention
        vit.register_tokens.add_(torch.randn(1, R, 32))
        assert (vit(x)[0] - out).abs().max() > 1e-3


@pytest.mark.parametrize('pos_embed', POSITIONS, ids=str)
@pytest.mark.parametrize('with_cls_token', [True, False])
def test_registers_with_every_position_embedding(pos_embed, with_cls_token):
    """The registers carry no position: zero rows of an absolute table, the extra tokens'
    bias of a relative one, no rotation; the MAE path (``keep``) gathers around them."""
    vit = _vit(num_register_tokens=R, pos_embed=pos_embed, with_cls_token=with_cls_token)
    E = vit.num_extra_tokens
    assert E == R + with_cls_token
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        (out,) = vit(x)
        assert out.shape == (2, 32, 4, 5)
        full = vit.forward_visible(x)
        keep = torch.arange(20).expand(2, -1)
        torch.testing.assert_close(vit.forward_visible(x, keep), full)
        keep = torch.tensor([[3, 0, 17], [19, 4, 8]])  # MAE: some patches, on the full grid
        assert vit.forward_visible(x, keep).shape == (2, E + 3, 32)
    modules = vit._pos_embed_modules()
    if not modules:
        return
    pe, C = modules[0], int(with_cls_token)
    position = vit._position(pe, (4, 5), None, full)
    if pe.kind == 'absolute':
        assert pe.num_extra_tokens == C
        assert position.shape == (1, E + 20, 32)
        assert position[:, C:E].abs().max() == 0
        torch.testing.assert_close(position[:, E:], pe.table((4, 5))[:, C:])
    elif pe.kind == 'relative':
        assert position.shape == (1, 2, E + 20, E + 20)
        if E:  # registers -> patches: the class token's learned (or zero) bias
            assert (position[:, :, :E, E:] == position[:, :, :1, E:E + 1]).all()
    else:
        assert position.cos.shape[2] == E + 20
        assert (position.cos[:, :, :E] == 1).all() and (position.sin[:, :, :E] == 0).all()
        assert (position.sin[:, :, E:] != 0).any()


def test_layer_scale_at_init_is_the_residual_plus_gamma_times_each_branch():
    block = TransformerEncoderLayer(16, 2, 32, layer_scale_init_value=1e-5).eval()
    assert (block.ls1.gamma == 1e-5).all() and (block.ls2.gamma == 1e-5).all()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        y = x + 1e-5 * block.attn(block.norm1(x))
        y = y + 1e-5 * block.mlp(block.norm2(y))
        out = block(x)
    torch.testing.assert_close(out, y)
    assert 0 < (out - x).abs().max() < 1e-4  # DINOv2's start: each layer near the identity
    with torch.no_grad():  # a learned gamma scales its branch channel by channel
        block.ls1.gamma.copy_(torch.linspace(-2, 2, 16))
        block.ls2.gamma.zero_()
        torch.testing.assert_close(block(x), x + block.ls1.gamma * block.attn(block.norm1(x)))


def test_layer_scale_in_the_vit_survives_init_weights_and_is_off_by_default():
    vit = VisionTransformer(arch=TINY, img_size=32, patch_size=8, layer_scale_init_value=1e-5)
    vit.init_weights()
    gammas = [p for n, p in vit.named_parameters() if n.endswith(('ls1.gamma', 'ls2.gamma'))]
    assert len(gammas) == 4 and all((g == 1e-5).all() for g in gammas)
    plain = VisionTransformer(arch=TINY, img_size=32, patch_size=8)
    for value in (None, 0):
        off = VisionTransformer(arch=TINY, img_size=32, patch_size=8,
                                layer_scale_init_value=value)
        assert list(off.state_dict()) == list(plain.state_dict())


def test_swiglu_by_hand():
    assert swiglu_hidden_dims(4 * 1536) == 4096  # DINOv2 ViT-g
    assert swiglu_hidden_dims(4 * 32) == 88  # HF's rule: (int(128 * 2 / 3) + 7) // 8 * 8
    ffn = randomize_(SwiGLU(32, 128))
    assert ffn.fc1.weight.shape == (2 * 88, 32) and ffn.fc2.weight.shape == (32, 88)
    x = torch.randn(3, 32)
    w, b = ffn.fc1.weight, ffn.fc1.bias
    gate, up = x @ w[:88].T + b[:88], x @ w[88:].T + b[88:]
    expected = (gate * torch.sigmoid(gate) * up) @ ffn.fc2.weight.T + ffn.fc2.bias
    torch.testing.assert_close(ffn(x), expected)
    vit = VisionTransformer(arch=TINY, img_size=32, patch_size=8, ffn_type='swiglu')
    assert isinstance(vit.blocks[1].mlp, SwiGLU)
    with pytest.raises(ValueError, match="Unknown ffn_type 'reglu'"):
        VisionTransformer(arch=TINY, img_size=32, patch_size=8, ffn_type='reglu')


def test_patch_14_at_518_and_inputs_that_do_not_tile():
    vit = _vit(img_size=518, patch_size=14, num_register_tokens=R)
    assert vit.grid_hw == (37, 37) and vit.pos_embed.weight.shape == (1, 1 + 37 * 37, 32)
    with torch.no_grad():
        assert vit(torch.randn(1, 3, 518, 518))[0].shape == (1, 32, 37, 37)
    x = torch.randn(1, 3, 63, 77)  # 4.5 x 5.5 patches of 14
    with pytest.raises(ValueError, match=r'input of spatial size \(63, 77\) does not tile'):
        _vit(img_size=56, patch_size=14)(x)
    cropped = _vit(img_size=56, patch_size=14, crop_to_patch=True)
    with torch.no_grad():  # the bottom / right remainder is dropped, as a strided conv does
        torch.testing.assert_close(cropped(x)[0], cropped(x[..., :56, :70])[0])
    with pytest.raises(ValueError, match='pad_to_patch and crop_to_patch exclude each other'):
        _vit(pad_to_patch=True, crop_to_patch=True)


def test_norm_every_output():
    vit = _vit(out_indices=(0, 1), norm_every_output=True)
    plain = _vit(out_indices=(0, 1))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        first, last = vit(x)
        raw_first, raw_last = plain(x)
    torch.testing.assert_close(last, raw_last)  # the last layer's output had it already
    expected = vit.norm(raw_first.flatten(2).transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(first, expected.reshape(first.shape))
    with pytest.raises(ValueError, match='needs final_norm=True'):
        _vit(norm_every_output=True, final_norm=False)


def test_antialias_resize_mode():
    vit = _vit(interpolate_mode='bicubic_antialias')
    table = vit.pos_embed.weight[:, 1:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2)
    expected = F.interpolate(table, size=(5, 6), mode='bicubic', align_corners=False,
                             antialias=True).flatten(2).transpose(1, 2)
    torch.testing.assert_close(vit.pos_embed.table((5, 6))[:, 1:], expected)
    with pytest.raises(ValueError, match="learned_1d tables only, not 'relative'"):
        _vit(interpolate_mode='bicubic_antialias', pos_embed='relative')


def test_registers_freeze_with_the_stem_and_own_checkpoints_round_trip():
    vit = _vit(num_register_tokens=R, layer_scale_init_value=1e-5, ffn_type='swiglu',
               frozen_stages=0)
    assert not vit.register_tokens.requires_grad and not vit.cls_token.requires_grad
    converted = convert_vit(vit.state_dict(), strict=True)
    again = VisionTransformer(arch=TINY, img_size=32, patch_size=8, num_register_tokens=R,
                              layer_scale_init_value=1e-5, ffn_type='swiglu')
    again.load_state_dict(converted, strict=True)
    torch.testing.assert_close(again.register_tokens, vit.register_tokens)
