"""token_statistics against a brute-force pairwise computation and hand-made cases."""
import pytest
import torch
import torch.nn.functional as F

from densevit.analysis.token_similarity import layer_token_statistics, token_statistics


def test_matches_brute_force_pairs():
    g = torch.Generator().manual_seed(0)
    feat = torch.randn(3, 8, 4, 5, generator=g) + torch.randn(1, 8, 1, 1, generator=g)
    x = feat.flatten(2).transpose(1, 2).double()  # [B, N, C]
    cos = []
    for b in range(3):
        for i in range(20):
            for j in range(20):
                if i != j:
                    cos.append(F.cosine_similarity(x[b, i], x[b, j], dim=0))
    mean = x.reshape(-1, 8).mean(0)
    common = mean.dot(mean) / (x.reshape(-1, 8) ** 2).sum(1).mean()
    s = token_statistics(feat)
    assert s['cosine'] == pytest.approx(torch.stack(cos).mean().item(), abs=1e-12)
    assert s['common'] == pytest.approx(common.item(), abs=1e-12)
    assert s['norm'] == pytest.approx(x.norm(dim=-1).mean().item(), abs=1e-12)


def test_hand_made_cases():
    v = torch.tensor([3.0, 4.0])
    same = v.view(1, 2, 1, 1).expand(2, 2, 3, 3)  # every token the vector (3, 4)
    assert token_statistics(same) == pytest.approx(dict(norm=5.0, cosine=1.0, common=1.0))
    # two tokens per image, +v and -v: opposite (cosine -1), nothing shared (common 0)
    opposite = torch.stack([v, -v], dim=1).view(1, 2, 1, 2)
    assert token_statistics(opposite) == pytest.approx(dict(norm=5.0, cosine=-1.0, common=0.0))
    with pytest.raises(ValueError, match='2 or more patches'):
        token_statistics(torch.ones(1, 2, 1, 1))


def test_every_layer_of_a_vit():
    from densevit.models.backbones.vit import VisionTransformer
    vit = VisionTransformer(arch=dict(embed_dims=32, num_layers=3, num_heads=2,
                                      feedforward_channels=64),
                            img_size=32, patch_size=8, with_cls_token=False).eval()
    x = torch.randn(2, 3, 32, 32)
    rows = layer_token_statistics(vit, x)
    assert len(rows) == 3 and vit.out_indices == [2]  # restored
    with torch.no_grad():
        last = vit(x)[-1]
    stats = {k: rows[-1][k] for k in ('norm', 'cosine', 'common')}
    assert stats == pytest.approx(token_statistics(last))
    assert not any(b.attn._forward_hooks or b.mlp._forward_hooks for b in vit.blocks)


def _share(t):
    flat = t.reshape(-1, t.shape[-1]).double()
    return (flat.mean(0).dot(flat.mean(0)) / (flat ** 2).sum(1).mean()).item()


def test_branch_shares_by_hand_and_a_dead_layer():
    """The attention and MLP outputs recomputed step by step from the first block's parts
    (pre-norm residual: x + attn(norm1 x), then + mlp(norm2 x)); then a block whose MLP
    adds a constant: its MLP share is 1."""
    from densevit.models.backbones.vit import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(arch=dict(embed_dims=16, num_layers=2, num_heads=2,
                                      feedforward_channels=32),
                            img_size=16, patch_size=4, with_cls_token=True).eval()
    x = torch.randn(3, 3, 16, 16)
    rows = layer_token_statistics(vit, x)
    with torch.no_grad():
        tokens, hw = vit.embed(x)
        t = torch.cat([vit.cls_token.expand(3, -1, -1), tokens], 1) + vit.pos_embed.table(hw)
        b = vit.blocks[0]
        a = b.attn(b.norm1(t))
        m = b.mlp(b.norm2(t + a))
    assert rows[0]['attn_common'] == pytest.approx(_share(a[:, 1:]), abs=1e-9)
    assert rows[0]['mlp_common'] == pytest.approx(_share(m[:, 1:]), abs=1e-9)
    assert 0 < rows[0]['mlp_common'] < 0.9
    with torch.no_grad():  # a dead MLP: zero weights in, a constant bias out
        vit.blocks[1].mlp.fc1.weight.zero_()
    rows = layer_token_statistics(vit, x)
    assert rows[1]['mlp_common'] == pytest.approx(1.0, abs=1e-9)
