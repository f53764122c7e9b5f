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
    assert rows[-1] == pytest.approx(token_statistics(last))
