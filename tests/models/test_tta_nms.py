"""densevit/models/tta/nms.py against a brute-force greedy NMS in plain Python."""
import pytest
import torch

from densevit.models.tta.nms import batched_nms, flip_boxes


def brute_force_nms(boxes, scores, labels, thr):
    """mmcv's nms semantics, one class at a time, with Python floats: sort by score,
    keep a box unless a kept box of its class overlaps it by IoU > thr."""
    def iou(a, b):
        iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = iw * ih
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties by index
    kept = []
    for i in order:
        if all(labels[k] != labels[i] or iou(boxes[k], boxes[i]) <= thr for k in kept):
            kept.append(i)
    return kept


def random_boxes(n, seed, classes=3):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 50
    wh = torch.rand(n, 2, generator=g) * 30 + 1
    boxes = torch.cat([xy, xy + wh], 1)
    # clusters of near-duplicates, as merged TTA views give
    boxes[n // 2:] = boxes[:n - n // 2] + torch.randn(n - n // 2, 4, generator=g)
    scores = torch.rand(n, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    return boxes, scores, labels


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('thr', [0.3, 0.5, 0.7])
def test_batched_nms_equals_brute_force(seed, thr):
    boxes, scores, labels = random_boxes(80, seed)
    keep = batched_nms(boxes, scores, labels, thr)
    expected = brute_force_nms(boxes.tolist(), scores.tolist(), labels.tolist(), thr)
    assert keep.tolist() == expected
    assert 0 < len(expected) < 80  # something was suppressed, something kept


def test_nms_is_class_wise_and_strict():
    box = torch.tensor([[0., 0., 10., 10.]])
    boxes = torch.cat([box, box, box + torch.tensor([5., 0., 5., 0.])])  # IoU 1, 1/3
    scores = torch.tensor([0.9, 0.8, 0.7])
    assert batched_nms(boxes, scores, torch.tensor([0, 1, 0]), 0.5).tolist() == [0, 1, 2]
    assert batched_nms(boxes, scores, torch.tensor([0, 0, 0]), 0.5).tolist() == [0, 2]
    # IoU exactly equal to the threshold is kept (suppression needs IoU > thr)
    assert batched_nms(boxes, scores, torch.tensor([0, 0, 0]), 1 / 3).tolist() == [0, 2]
    assert batched_nms(boxes[:0], scores[:0], scores[:0].long(), 0.5).tolist() == []


def test_flip_boxes_is_mmcv_flip_and_its_own_inverse():
    boxes = torch.tensor([[1., 2., 5., 9.], [0., 0., 20., 10.]])
    flipped = flip_boxes(boxes, (10, 20))
    assert flipped.tolist() == [[15., 2., 19., 9.], [0., 0., 20., 10.]]
    assert torch.equal(flip_boxes(flipped, (10, 20)), boxes)
    with pytest.raises(ValueError, match='flip_direction'):
        flip_boxes(boxes, (10, 20), 'sideways')
