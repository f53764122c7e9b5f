"""Random masks, the patch layout, and the build-time errors of masked pre-training."""
import pytest
import torch

from densevit.models.selfsup.masking import num_kept, patchify, random_masking, unpatchify

from selfsup_models import build, mae_cfg, mpp_cfg


@pytest.mark.parametrize('ratio', [0.75, 0.5, 0.3, 0.9])
def test_masks_keep_exactly_round_n_and_differ_per_image(ratio):
    N = 49
    keep, mask = random_masking(16, N, ratio, torch.Generator().manual_seed(0))
    n = round(N * (1 - ratio))
    assert keep.shape == (16, n) and mask.shape == (16, N)
    assert (mask.sum(1) == N - n).all()
    assert not mask.gather(1, keep).any()  # kept patches are not masked
    assert (keep.diff(dim=1) > 0).all()  # ascending, no repeats
    assert len({tuple(k.tolist()) for k in keep}) == 16  # each image its own mask


def test_masks_are_reproducible_with_a_seed():
    a = random_masking(4, 64, 0.75, torch.Generator().manual_seed(3))
    b = random_masking(4, 64, 0.75, torch.Generator().manual_seed(3))
    c = random_masking(4, 64, 0.75, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_masks_are_uniform_over_patches():
    """Every patch is hidden about as often: 4000 masks of 16 patches at 75%."""
    _, mask = random_masking(4000, 16, 0.75, torch.Generator().manual_seed(0))
    freq = mask.float().mean(0)
    assert (freq - 0.75).abs().max() < 0.03  # 4.4 standard deviations of 0.0068


def test_patchify_layout_by_hand():
    img = torch.arange(2 * 4 * 6).reshape(1, 2, 4, 6)  # C=2, a 2x3 grid of 2x2 patches
    p = patchify(img, 2)
    assert p.shape == (1, 6, 8)
    # patch (row 0, col 1): pixels (0,2), (0,3), (1,2), (1,3), each channel 0 then 1
    assert p[0, 1].tolist() == [2, 26, 3, 27, 8, 32, 9, 33]
    # patch (row 1, col 0)
    assert p[0, 3].tolist() == [12, 36, 13, 37, 18, 42, 19, 43]
    assert torch.equal(unpatchify(p, 2, (2, 3), channels=2), img)


def test_num_kept_rounds():
    assert num_kept(196, 0.75) == 49 and num_kept(256, 0.75) == 64 and num_kept(10, 0.33) == 7


@pytest.mark.parametrize('ratio', [0, 1, 1.5, -0.25])
@pytest.mark.parametrize('make', [mae_cfg, mpp_cfg], ids=['mae', 'mpp'])
def test_mask_ratio_outside_0_1_is_refused(make, ratio):
    with pytest.raises(ValueError, match=rf'mask_ratio must be in \(0, 1\).*got {ratio}'):
        build(make(mask_ratio=ratio))


@pytest.mark.parametrize('make', [mae_cfg, mpp_cfg], ids=['mae', 'mpp'])
def test_a_grid_that_cannot_be_masked_is_refused(make):
    with pytest.raises(ValueError, match=r'img_size 30x30 is not a whole grid of 8x8 patches '
                                         r'\(a 3.75 x 3.75 grid\)'):
        build(make(img_size=30))
    with pytest.raises(ValueError, match='a 1x1 patch grid has 1 patch; masking needs at least 2'):
        build(make(img_size=8))
    with pytest.raises(ValueError, match=r'mask_ratio=0.9 on a 1x2 patch grid keeps 0 of 2'):
        build(make(img_size=(8, 16), mask_ratio=0.9))


def test_replace_probs_must_sum_to_one():
    cfg = mpp_cfg()
    cfg['replace_probs'] = (0.8, 0.1, 0.2)
    with pytest.raises(ValueError, match='replace_probs must be three non-negative'):
        build(cfg)


def test_a_hybrid_vit_is_refused():
    cfg = mae_cfg()
    cfg['backbone']['stem'] = dict(type='ResNet', depth=18, out_indices=(1,))
    with pytest.raises(ValueError, match='a hybrid ViT .* sees every pixel through its CNN'):
        build(cfg)


def test_backbone_must_be_a_vit():
    cfg = mae_cfg()
    cfg['backbone'] = dict(type='ResNet', depth=18)
    with pytest.raises(TypeError, match='the backbone must be a VisionTransformer, got ResNet'):
        build(cfg)
