"""Tests for the plain ViT backbone: sizes of the named archs, shapes, PE resizing."""
import pytest
import torch

from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.vit import ARCH_SETTINGS, VisionTransformer
from densevit.registry import MODELS

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)

# Backbone sizes (no classification head) in millions: timm's published
# counts for vit_{tiny,small,base,large}_patch16_224 / vit_huge_patch14_224
# (5.72M, 22.05M, 86.57M, 304.33M, 632.05M) less their 1000-way head D*1000 + 1000.
PUBLISHED_M = {'Ti': 5.524, 'S': 21.666, 'B': 85.799, 'L': 303.302, 'H': 630.765}


def expected_params(D, L, F, patch, img=224, in_channels=3):
    """Parameter count from the architecture alone (ViT paper, Sec. 3.1)."""
    n = (img // patch) ** 2
    stem = in_channels * patch * patch * D + D  # patch conv + bias
    tokens = D + (n + 1) * D  # cls token + position table
    attn = 3 * D * D + 3 * D + D * D + D  # fused qkv + proj (with biases)
    mlp = D * F + F + F * D + D
    norms = 2 * 2 * D
    return stem + tokens + L * (attn + mlp + norms) + 2 * D  # + final norm


@pytest.mark.parametrize('arch', list(ARCH_SETTINGS))
def test_param_counts(arch):
    patch = 14 if arch == 'H' else 16
    with torch.device('meta'):  # no memory, no init: L and H stay instant
        model = VisionTransformer(arch=arch, patch_size=patch)
    count = sum(p.numel() for p in model.parameters())
    s = ARCH_SETTINGS[arch]
    assert count == expected_params(s['embed_dims'], s['num_layers'],
                                    s['feedforward_channels'], patch)
    assert abs(count / 1e6 - PUBLISHED_M[arch]) / PUBLISHED_M[arch] < 0.01


def test_paper_table1_base():
    s = ARCH_SETTINGS['B']
    with_head = expected_params(s['embed_dims'], 12, s['feedforward_channels'], 16) + 768 * 1001
    assert abs(with_head / 86e6 - 1) < 0.01  # "ViT-Base 86M"


def test_timm_key_names():
    keys = set(VisionTransformer(arch=TINY, img_size=32, patch_size=8).state_dict())
    for k in ('patch_embed.proj.weight', 'cls_token', 'pos_embed.weight',
              'blocks.0.attn.qkv.weight', 'blocks.1.mlp.fc2.bias', 'norm.weight'):
        assert k in keys


def test_loads_timm_layout_with_other_grid():
    """timm's bare ``pos_embed`` key, made for a 6x6 grid, converted (the timm layout's one
    place, densevit/checkpoint/vit.py), loads into a 4x4 model: the table resized."""
    src = VisionTransformer(arch=TINY, img_size=48, patch_size=8)
    src.init_weights()
    sd = src.state_dict()
    sd['pos_embed'] = sd.pop('pos_embed.weight')
    dst = VisionTransformer(arch=TINY, img_size=32, patch_size=8)
    dst.load_state_dict(convert_vit(sd))  # strict: nothing missing, nothing unexpected
    torch.testing.assert_close(dst.pos_embed.weight, src.pos_embed.table((4, 4)))
    torch.testing.assert_close(dst.blocks[1].mlp.fc1.weight, src.blocks[1].mlp.fc1.weight)


def _tiny(**kwargs):
    cfg = dict(type='VisionTransformer', arch=TINY, img_size=32, patch_size=8)
    cfg.update(kwargs)
    model = MODELS.build(cfg)
    model.init_weights()
    return model.eval()


def test_forward_shapes_and_resize():
    model = _tiny(img_size=(32, 48))
    assert model.out_channels == [32] and model.out_strides == [8]
    with torch.no_grad():
        (out,) = model(torch.randn(2, 3, 32, 48))
        assert out.shape == (2, 32, 4, 6)
        (out,) = model(torch.randn(1, 3, 64, 40))  # grid 8x5, table made for 4x6
        assert out.shape == (1, 32, 8, 5)
        assert torch.isfinite(out).all()


def test_multiple_out_indices_and_final_norm():
    model = _tiny(out_indices=(0, -1), drop_path_rate=0.1)
    assert model.out_indices == [0, 1]
    assert model.out_channels == [32, 32] and model.out_strides == [8, 8]
    x = torch.randn(1, 3, 32, 48)
    with torch.no_grad():
        first, last = model(x)
    assert first.shape == last.shape == (1, 32, 4, 6)
    # The last map is LayerNorm-ed: zero mean, unit variance over channels.
    torch.testing.assert_close(last.mean(1), torch.zeros(1, 4, 6), atol=1e-5, rtol=0)
    unnormed = _tiny(out_indices=-1, final_norm=False)
    unnormed.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        (raw,) = unnormed(x)
    assert not torch.allclose(raw, last)


def test_without_cls_token():
    model = _tiny(with_cls_token=False)
    assert model.cls_token is None
    with torch.no_grad():
        assert model(torch.randn(1, 3, 16, 24))[0].shape == (1, 32, 2, 3)


def test_bad_out_indices_and_input():
    with pytest.raises(IndexError):
        _tiny(out_indices=2)
    with pytest.raises(ValueError):
        _tiny()(torch.randn(1, 3, 30, 32))


def test_frozen_stages():
    model = _tiny(frozen_stages=1)
    model.train()
    assert not model.cls_token.requires_grad
    assert not any(p.requires_grad for p in model.blocks[0].parameters())
    assert all(p.requires_grad for p in model.blocks[1].parameters())
    assert not model.blocks[0].training and model.blocks[1].training


def test_backward():
    model = _tiny(out_indices=(0, 1)).train()
    outs = model(torch.randn(1, 3, 16, 16))
    sum(o.sum() for o in outs).backward()
    assert model.pos_embed.weight.grad is not None
    assert model.cls_token.grad is not None
