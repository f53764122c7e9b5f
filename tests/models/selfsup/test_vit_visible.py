"""The ViT encoder on the visible patches only (MAE), for every position-embedding type and placement."""
import pytest
import torch

from densevit.models.layers.token_select import select_bias, select_table
from densevit.models.selfsup.masking import random_masking

from selfsup_models import PE_CONFIGS, build, pe_id, vit_cfg


def full_grid_position(vit, module, hw):
    return module.table(hw) if module.kind == 'absolute' else module.bias(hw)


def reference_visible(vit, tokens, hw, keep):
    """Brute force: every token goes through the layers with its full-grid position code,
    but attention may read only the extra and the kept tokens. The kept tokens' outputs
    then equal a run on the kept tokens alone."""
    B, N, _ = tokens.shape
    E = vit.num_extra_tokens
    x = tokens if vit.cls_token is None else torch.cat(
        [vit.cls_token.expand(B, -1, -1), tokens], dim=1)
    allowed = torch.zeros(B, E + N, dtype=torch.bool)
    allowed[:, :E] = True
    allowed.scatter_(1, keep + E, True)
    key_mask = torch.zeros(B, 1, 1, E + N).masked_fill(~allowed[:, None, None], float('-inf'))
    placement, pe = vit.pos_embed_placement, vit.pos_embed
    if pe is not None and placement == 'stem':
        x = x + pe.table(hw)
    for i, block in enumerate(vit.blocks):
        position = None
        if pe is not None and placement == 'every_layer_shared':
            position = full_grid_position(vit, pe, hw)
        elif pe is not None and placement == 'every_layer':
            position = full_grid_position(vit, pe[i], hw)
        mask = key_mask
        if position is not None and vit.pos_embed_type == 'relative':
            mask = mask + position
        elif position is not None:
            x = x + position
        x = block(x, attn_mask=mask)
    x = vit.norm(x)
    rows = torch.cat([torch.arange(E).expand(B, -1), keep + E], dim=1)
    return torch.stack([x[b, rows[b]] for b in range(B)])


@pytest.mark.parametrize('cls', [True, False], ids=['cls', 'no-cls'])
@pytest.mark.parametrize('pe', PE_CONFIGS, ids=pe_id)
def test_visible_patches_equal_brute_force(pe, cls):
    vit = build(vit_cfg(img_size=(32, 40), pos_embed=pe, with_cls_token=cls)).eval()
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        tokens, hw = vit.embed(x)
        keep, _ = random_masking(2, hw[0] * hw[1], 0.6, torch.Generator().manual_seed(1))
        out = vit.encode(tokens, hw, keep)
        assert out.shape == (2, vit.num_extra_tokens + keep.shape[1], 32)
        torch.testing.assert_close(out, reference_visible(vit, tokens, hw, keep),
                                   rtol=1e-4, atol=1e-5)
        # every patch kept: the last layer of the plain forward, bit for bit
        all_kept = torch.arange(hw[0] * hw[1]).expand(2, -1)
        grid = vit.encode(tokens, hw, all_kept)[:, vit.num_extra_tokens:]
        (feat,) = vit(x)
        assert torch.equal(grid.transpose(1, 2).reshape(feat.shape), feat)
        assert torch.equal(vit.forward_visible(x, keep), out)


def test_select_helpers_by_hand():
    """Rows of a table and rows + columns of a bias, extra tokens first."""
    table = torch.arange(5.)[None, :, None]  # E = 1 extra row, then a 4-patch grid
    keep = torch.tensor([[3, 0], [1, 2]])
    assert select_table(table, keep, 1)[..., 0].tolist() == [[0, 4, 1], [0, 2, 3]]
    assert select_table(table, None, 1) is table
    bias = (10 * torch.arange(5.)[:, None] + torch.arange(5.))[None, None]  # entry q*10 + k
    out = select_bias(bias, keep, 1)[:, 0]
    assert out[0].tolist() == [[0, 4, 1], [40, 44, 41], [10, 14, 11]]
    assert out[1].tolist() == [[0, 2, 3], [20, 22, 23], [30, 32, 33]]
