"""ViT analysis computations against cases with known answers."""
import itertools
import math

import pytest
import torch

from densevit.analysis.attention_capture import capture_attention
from densevit.analysis.attention_distance import mean_attention_distance
from densevit.analysis.attention_rollout import attention_rollout, decoder_query_maps, rollout_map
from densevit.analysis.patch_filters import patch_embedding_pcs, to_unit_range
from densevit.analysis.pos_embed_similarity import cosine_similarity_grid, position_similarity
from densevit.models.backbones.vit import VisionTransformer
from densevit.models.layers.pos_embed_2d import sincos_2d_table

TINY = dict(embed_dims=32, num_layers=3, num_heads=4, feedforward_channels=64)


def tiny_vit(**kw):
    torch.manual_seed(0)
    vit = VisionTransformer(arch=TINY, img_size=32, patch_size=8, **kw)
    vit.init_weights()
    return vit.eval()


# 1. position-embedding similarity
def test_sincos_similarity_falls_with_distance():
    hw = (9, 9)
    grid = cosine_similarity_grid(sincos_2d_table(hw, 128), hw)
    ii = torch.arange(9)
    assert torch.allclose(grid[ii[:, None], ii[None], ii[:, None], ii[None]],
                          torch.ones(9, 9), atol=1e-5)  # tile (i, j) at (i, j) is 1
    row = grid[4, 4, 4, 4:8]  # from the centre to the right
    col = grid[4, 4, 4:8, 4]  # from the centre down
    assert (row[1:] < row[:-1]).all() and (col[1:] < col[:-1]).all()
    assert torch.allclose(grid, grid.permute(2, 3, 0, 1), atol=1e-6)  # symmetric


@pytest.mark.parametrize('pe, names', [
    (dict(type='learned_1d', placement='stem'), ['stem']),
    (dict(type='learned_2d', placement='every_layer'), ['layer0', 'layer1', 'layer2']),
    (dict(type='sincos_2d', placement='every_layer_shared'), ['shared']),
    (dict(type='relative', placement='every_layer'), ['layer0', 'layer1', 'layer2']),
])
def test_position_similarity_every_type(pe, names):
    res = position_similarity(tiny_vit(pos_embed=pe))
    assert [r['name'] for r in res] == names
    for r in res:
        assert r['grid'].shape == (4, 4, 4, 4)
        if r['kind'] == 'cosine':
            assert torch.allclose(r['grid'].reshape(16, 16).diagonal(), torch.ones(16), atol=1e-5)
        else:
            assert r['per_head'].shape == (4, 4, 4, 4, 4)
            # a relative bias depends only on the offset: (0,0)->(1,1) equals (2,2)->(3,3)
            assert torch.equal(r['per_head'][:, 0, 0, 1, 1], r['per_head'][:, 2, 2, 3, 3])


# 2. mean attention distance
def brute_force_mean_pair_distance(hw, patch):
    cells = list(itertools.product(range(hw[0]), range(hw[1])))
    total = sum(math.dist(a, b) for a, b in itertools.product(cells, cells))
    return patch * total / len(cells) ** 2


@pytest.mark.parametrize('extra', [0, 1])
def test_attention_distance_known_answers(extra):
    hw, patch, N = (3, 4), 16, 12 + extra
    ident = torch.eye(N).expand(2, 3, N, N)
    assert torch.allclose(mean_attention_distance(ident, hw, patch, extra),
                          torch.zeros(2, 3, dtype=torch.float64))
    uniform = torch.full((2, 3, N, N), 1. / N)
    expected = brute_force_mean_pair_distance(hw, patch)
    assert torch.allclose(mean_attention_distance(uniform, hw, patch, extra),
                          torch.full((2, 3), expected, dtype=torch.float64))


# 3. patch-embedding principal components
def test_first_pc_is_planted_filter():
    g = torch.Generator().manual_seed(0)
    planted = torch.randn(3, 4, 4, generator=g)
    planted /= planted.norm()
    coeff = torch.randn(64, 1, 1, 1, generator=g) * 10
    weight = coeff * planted + 0.01 * torch.randn(64, 3, 4, 4, generator=g)
    pcs, ratio = patch_embedding_pcs(weight, 5)
    assert pcs.shape == (5, 3, 4, 4) and ratio[0] > 0.99
    assert abs(float((pcs[0] * planted).sum())) > 0.999  # equal up to sign
    tiles = to_unit_range(pcs)
    assert tiles.amin() == 0 and tiles.amax() == 1


def test_pcs_span_planted_subspace():
    g = torch.Generator().manual_seed(1)
    basis = torch.linalg.qr(torch.randn(48, 3, generator=g))[0].t()  # 3 orthonormal filters
    weight = (torch.randn(32, 3, generator=g) @ basis).reshape(32, 3, 4, 4)
    pcs, ratio = patch_embedding_pcs(weight, 3)
    pcs = pcs.reshape(3, 48).float()
    residual = pcs - (pcs @ basis.t()) @ basis  # part of each PC outside the planted span
    assert residual.abs().max() < 1e-5
    assert torch.allclose(ratio.sum(), torch.tensor(1., dtype=ratio.dtype))


# 4. attention rollout
def test_rollout_of_identity_is_identity():
    N = 5
    eye = torch.eye(N).expand(2, 3, N, N)
    roll = attention_rollout([eye, eye, eye])
    assert torch.allclose(roll, torch.eye(N, dtype=roll.dtype).expand(2, N, N))
    cls_map = rollout_map(roll, (2, 2), num_extra_tokens=1)
    assert torch.equal(cls_map, torch.zeros(2, 2, 2, dtype=roll.dtype))  # all on cls itself
    no_cls = rollout_map(torch.eye(4, dtype=torch.float64)[None], (2, 2))
    assert torch.allclose(no_cls, torch.full((1, 2, 2), 0.25, dtype=torch.float64))


def test_rollout_matches_brute_force_product():
    g = torch.Generator().manual_seed(0)
    B, H, N = 2, 3, 4
    layers = [torch.rand(B, H, N, N, generator=g).softmax(-1) for _ in range(2)]
    roll = attention_rollout(layers)
    for b in range(B):
        mats = []
        for a in layers:
            m = [[sum(float(a[b, h, i, j]) for h in range(H)) / H + (i == j)
                  for j in range(N)] for i in range(N)]
            mats.append([[v / sum(r) for v in r] for r in m])
        second, first = mats[1], mats[0]
        expected = [[sum(second[i][k] * first[k][j] for k in range(N)) for j in range(N)]
                    for i in range(N)]
        assert torch.allclose(roll[b], torch.tensor(expected, dtype=roll.dtype))


def test_decoder_query_maps_average_heads():
    a = torch.rand(2, 5, 6)
    maps = decoder_query_maps(a, (2, 3), [4, 1])
    assert torch.allclose(maps[0], a.mean(0)[4].reshape(2, 3))
    assert torch.allclose(maps[1], a.mean(0)[1].reshape(2, 3))


# 5. capturing attention
@pytest.mark.parametrize('pe', ['learned_1d', dict(type='relative', placement='every_layer')])
def test_capture_leaves_vit_outputs_unchanged(pe):
    vit = tiny_vit(pos_embed=pe)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = vit(x)[0]
        with capture_attention(vit) as rec:
            captured = vit(x)[0]
    assert torch.equal(plain, captured)
    assert all(b.attn.record is None for b in vit.blocks)  # off again: fast path only
    assert len(rec.self_attn) == 3 and rec.self_attn[0].shape == (2, 4, 17, 17)
    assert torch.allclose(rec.self_attn[1].sum(-1), torch.ones(2, 4, 17))


def test_captured_weights_reproduce_attention_output():
    vit = tiny_vit(pos_embed=dict(type='relative', placement='every_layer'))
    attn = vit.blocks[0].attn
    x = torch.randn(2, 17, 32)
    bias = vit.pos_embed[0].bias((4, 4))
    with torch.no_grad(), capture_attention(attn) as rec:
        out = attn(x, attn_mask=bias)
        v = attn.qkv(x).reshape(2, 17, 3, 4, 8)[:, :, 2].transpose(1, 2)
        by_hand = attn.proj((rec.self_attn[0] @ v).transpose(1, 2).reshape(2, 17, 32))
    assert torch.allclose(out, by_hand, atol=1e-5)


def test_capture_detr_cross_attention():
    from densevit.models.layers.detr_transformer import DetrTransformer
    torch.manual_seed(0)
    tr = DetrTransformer(embed_dims=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                         feedforward_channels=32, dropout=0.).eval()
    src, pos = torch.randn(2, 12, 16), torch.randn(2, 12, 16)
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[1, 9:] = True
    qpos = torch.randn(2, 5, 16)
    with torch.no_grad():
        plain = tr(src, mask, pos, qpos)[0]
        with capture_attention(tr) as rec:
            captured = tr(src, mask, pos, qpos)[0]
    assert torch.allclose(plain, captured, atol=1e-6)
    assert len(rec.cross_attn) == 2 and rec.cross_attn[-1].shape == (2, 2, 5, 12)
    assert rec.cross_attn[-1][1, :, :, 9:].abs().max() == 0  # padding gets no weight
    assert all(layer.record_cross_attn is None for layer in tr.decoder)
