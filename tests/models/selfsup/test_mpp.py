"""Masked patch prediction: the 3-bit mean-colour target by hand, the 80/10/10 corruption, the loss."""
import torch
import torch.nn.functional as F

from densevit.models.selfsup.heads import mean_colour_classes
from densevit.models.selfsup.masking import noise_masking
from densevit.models.selfsup.mpp import KEPT, MASK_TOKEN, OTHER_PATCH, UNTOUCHED, corrupt_tokens

from selfsup_models import build, mpp_cfg, vit_cfg


def hand_image():
    """A 4x4 RGB image of four 2x2 patches, channel values chosen at level boundaries."""
    img = torch.zeros(1, 3, 4, 4)
    patches = {  # (row, col): per channel the 4 pixel values
        (0, 0): ([0] * 4, [31] * 4, [32] * 4),            # levels 0, 0, 1
        (0, 1): ([31, 32, 33, 32], [255] * 4, [0, 0, 0, 64]),  # means 32, 255, 16: 1, 7, 0
        (1, 0): ([255] * 4, [224] * 4, [223] * 4),        # 7, 7, 6
        (1, 1): ([31, 32, 32, 32], [95, 97, 96, 96], [128] * 4),  # means 31.75, 96, 128: 0, 3, 4
    }
    for (r, c), channels in patches.items():
        for ch, values in enumerate(channels):
            img[0, ch, 2 * r:2 * r + 2, 2 * c:2 * c + 2] = torch.tensor(values, dtype=torch.float).view(2, 2)
    return img


def test_mean_colour_classes_by_hand():
    classes = mean_colour_classes(hand_image(), 2)
    assert classes.tolist() == [[0 * 64 + 0 * 8 + 1, 1 * 64 + 7 * 8 + 0,
                                 7 * 64 + 7 * 8 + 6, 0 * 64 + 3 * 8 + 4]]
    assert mean_colour_classes(torch.full((1, 3, 2, 2), 255.), 2).item() == 511
    assert mean_colour_classes(hand_image(), 2, bits=1).tolist() == [[0, 2, 7, 1]]


def test_the_model_scores_the_un_normalised_rgb_image():
    """Through the data preprocessor (BGR -> RGB, normalised) the target is still exact."""
    model = build(mpp_cfg(img_size=4, patch_size=2)).eval()
    rgb = hand_image()[0]
    data = model.data_preprocessor(dict(inputs=[rgb.flip(0).to(torch.uint8)]), False)
    out = model(data['inputs'], mode='tensor')
    assert torch.equal(out['target'], mean_colour_classes(hand_image(), 2))


def test_corruption_proportions():
    g = torch.Generator().manual_seed(0)
    B, N, D = 64, 256, 4
    tokens = torch.randn(B, N, D, generator=g)
    mask_token = torch.full((1, 1, D), 7.)
    _, mask = noise_masking(torch.rand(B, N, generator=g), N // 2)
    out, kind = corrupt_tokens(tokens, mask, torch.rand(B, N, generator=g),
                               torch.rand(B, N, generator=g), mask_token, (0.8, 0.1, 0.1))
    assert (mask.sum(1) == N // 2).all()  # exactly half of each image's patches
    assert torch.equal(kind != UNTOUCHED, mask)
    corrupted = kind[mask]
    for k, p, tol in ((MASK_TOKEN, 0.8, 0.02), (OTHER_PATCH, 0.1, 0.015), (KEPT, 0.1, 0.015)):
        assert abs((corrupted == k).float().mean().item() - p) < tol  # about 4.5 std devs
    assert (out[kind == MASK_TOKEN] == 7.).all()
    same = (kind == UNTOUCHED) | (kind == KEPT)
    assert torch.equal(out[same], tokens[same])
    # another patch's embedding: equal to exactly one token of the batch, never its own
    others = out[kind == OTHER_PATCH]
    matches = (others[:, None] == tokens.reshape(B * N, D)[None]).all(-1)
    assert (matches.sum(1) == 1).all()
    assert not (others == tokens[kind == OTHER_PATCH]).all(-1).any()
    partner_images = matches.float().argmax(1) // N
    assert len(set(partner_images.tolist())) > 1  # from any image of the batch


def test_loss_is_cross_entropy_on_the_corrupted_patches_only():
    model = build(mpp_cfg()).train()
    img = torch.randn(2, 3, 32, 32)
    torch.manual_seed(3)
    out = model(img, mode='tensor')
    torch.manual_seed(3)
    losses = model(img, mode='loss')
    assert out['mask'].sum(1).tolist() == [8, 8]
    ref = F.cross_entropy(out['logits'][out['mask']], out['target'][out['mask']])
    torch.testing.assert_close(losses['loss_mpp'], ref)
    losses['loss_mpp'].backward()
    assert model.mask_token.grad is not None and model.head.fc.weight.grad is not None


def test_checkpoint_keys_and_predictions():
    model = build(mpp_cfg()).eval()
    sd = model.state_dict()
    vit = build(vit_cfg())
    assert {k[len('backbone.'):] for k in sd if k.startswith('backbone.')} == set(vit.state_dict())
    assert {k for k in sd if not k.startswith('backbone.')} == {'mask_token', 'head.fc.weight',
                                                                'head.fc.bias'}
    with torch.no_grad():
        pred = model(torch.randn(2, 3, 32, 32), mode='predict')
    for s in pred:
        assert 0 <= float(s.pretrain_acc) <= 1 and float(s.pretrain_loss) > 0
        assert s.patch_mask.shape == (4, 4) and int(s.patch_mask.sum()) == 8
