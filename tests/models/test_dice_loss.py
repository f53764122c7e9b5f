"""DiceLoss against a per-pixel loop and a hand-computed case."""
import math

import pytest
import torch

from densevit.models.losses.dice_loss import DiceLoss


def dice_loop(logits, label, ignore_index, eps, naive):
    """Brute force: one (image, class) pair at a time, one pixel at a time."""
    prob = logits.softmax(1)
    b, k, h, w = logits.shape
    scores = []
    for i in range(b):
        for c in range(k):
            inter = p_sum = t_sum = 0.0
            for y in range(h):
                for x in range(w):
                    if label[i, y, x] == ignore_index:
                        continue
                    p, t = float(prob[i, c, y, x]), float(label[i, y, x] == c)
                    inter += p * t
                    p_sum += p if naive else p * p
                    t_sum += t
            scores.append((2 * inter + eps) / (p_sum + t_sum + eps))
    return 1 - sum(scores) / len(scores)


@pytest.mark.parametrize('naive', [False, True])
def test_matches_loop_with_ignored_pixels(naive):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, 6, generator=g)
    label = torch.randint(0, 3, (2, 5, 6), generator=g)
    label[0, :2] = 255
    loss = DiceLoss(eps=1e-3, naive_dice=naive, loss_weight=0.5)(logits, label)
    assert loss.item() == pytest.approx(0.5 * dice_loop(logits, label, 255, 1e-3, naive), abs=1e-6)


def test_hand_computed_two_pixels():
    # probabilities (class 0, class 1) per pixel: (0.5, 0.5) and (e/(1+e), 1/(1+e)) ~ (.731, .269)
    logits = torch.tensor([[[[0.0, 1.0]], [[0.0, 0.0]]]])  # [1, 2, 1, 2]
    label = torch.tensor([[[0, 1]]])
    q = math.e / (1 + math.e)
    d0 = 2 * 0.5 / (0.25 + q * q + 1)  # class 0: label on pixel 0
    d1 = 2 * (1 - q) / (0.25 + (1 - q) ** 2 + 1)  # class 1: label on pixel 1
    loss = DiceLoss(eps=0.0)(logits, label)
    assert loss.item() == pytest.approx(1 - (d0 + d1) / 2, abs=1e-6)


def test_ignored_pixels_get_no_gradient_and_all_ignored_is_zero():
    logits = torch.randn(1, 4, 3, 3, requires_grad=True)
    label = torch.full((1, 3, 3), 255)
    label[0, 0, 0] = 2
    DiceLoss()(logits, label).backward()
    assert logits.grad[0, :, 1:].abs().max() == 0
    assert logits.grad[0, :, 0, 0].abs().max() > 0
    all_ignored = DiceLoss()(torch.randn(1, 4, 3, 3), torch.full((1, 3, 3), 255))
    assert all_ignored.item() == pytest.approx(0.0) and torch.isfinite(all_ignored)


def test_out_of_range_label_is_named():
    with pytest.raises(ValueError, match=r'\[0, 3\).*\[7\]'):
        DiceLoss()(torch.randn(1, 3, 2, 2), torch.tensor([[[0, 7], [1, 2]]]))
