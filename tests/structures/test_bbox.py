"""Box ops against hand-computed cases."""
import torch

from densevit.structures import (
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xyxy_to_cxcywh,
    generalized_box_iou,
)


def test_format_round_trip():
    xyxy = torch.tensor([[10., 20., 30., 60.], [0., 0., 1., 1.]])
    cxcywh = box_xyxy_to_cxcywh(xyxy)
    assert torch.equal(cxcywh, torch.tensor([[20., 40., 20., 40.], [0.5, 0.5, 1., 1.]]))
    assert torch.equal(box_cxcywh_to_xyxy(cxcywh), xyxy)


def test_iou_and_giou_hand_computed():
    a = torch.tensor([[0., 0., 2., 2.]])
    b = torch.tensor([[1., 1., 3., 3.], [4., 0., 6., 2.], [0., 0., 2., 2.]])
    iou, union = box_iou(a, b)
    # overlap 1, union 4 + 4 - 1 = 7; disjoint; identical
    assert torch.allclose(iou, torch.tensor([[1 / 7, 0., 1.]]))
    assert torch.allclose(union, torch.tensor([[7., 8., 4.]]))
    giou = generalized_box_iou(a, b)
    # enclosing 3x3 = 9: 1/7 - (9-7)/9 ; enclosing 6x2 = 12: 0 - (12-8)/12
    assert torch.allclose(giou, torch.tensor([[1 / 7 - 2 / 9, -1 / 3, 1.]]))


def test_degenerate_boxes_are_finite():
    point = torch.tensor([[1., 1., 1., 1.]])
    line = torch.tensor([[0., 0., 0., 5.]])
    inverted = torch.tensor([[3., 3., 1., 1.]])
    boxes = torch.cat([point, line, inverted])
    assert torch.equal(box_area(boxes), torch.zeros(3))
    iou, _ = box_iou(boxes, boxes)
    giou = generalized_box_iou(boxes, boxes)
    assert torch.isfinite(iou).all() and torch.isfinite(giou).all()
    assert torch.equal(iou, torch.zeros(3, 3))
    assert (giou >= -1).all() and (giou <= 1).all()
    # a point inside a unit box: IoU 0, enclosing = the box = union, so GIoU 0
    assert generalized_box_iou(point, torch.tensor([[0., 0., 2., 2.]])).item() == 0.0
    # gradients stay finite too
    x = boxes.clone().requires_grad_()
    generalized_box_iou(x, torch.tensor([[0., 0., 2., 2.]])).sum().backward()
    assert torch.isfinite(x.grad).all()
