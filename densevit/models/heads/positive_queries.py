"""Co-DETR's customized positive queries (Zong et al. 2023, §3.3): which of an auxiliary
head's anchors become extra decoder queries, with what reference box and target.

Per image, the anchors the auxiliary head assigned to an object (at most ``max_pos``, a
random subset beyond that), then random background anchors until every image has as many
queries as the image with the most positives (at least ``min_queries``). A query's
reference box is its anchor, normalised by the image size; a positive's target is the
box and class its anchor was assigned, a background anchor's is "no object". The random
choices come from ``draws`` (:class:`~densevit.utils.random_draws.UniformDraws`): names
``'aux_positives'`` ([P] per image with more than ``max_pos`` positives) and
``'aux_negatives'`` ([A − P] per image that needs padding); the order of the U[0, 1)
numbers is the random order.
"""
import torch

from densevit.structures import box_xyxy_to_cxcywh


def random_order(draws, name, n, device):
    """A random permutation of range(n) [n] from ``n`` uniform draws (their ranks)."""
    return draws(name, (n,), device).argsort()


def positive_queries(anchors, labels, boxes, img_sizes, num_classes, draws, max_pos=300,
                     min_queries=9):
    """Queries of one auxiliary head's assignment.

    Args:
        anchors (Tensor): [B, A, 4] xyxy pixels (all levels), per image.
        labels (Tensor): [B, A] each anchor's class (``num_classes``: background).
        boxes (Tensor): [B, A, 4] xyxy pixels, each positive anchor's target box.
        img_sizes (list[tuple]): per image (h, w), the size the boxes are normalised by.
        num_classes (int): K.
        draws (callable): the random numbers, see the module docstring.
        max_pos (int): most positives kept per image (300).
        min_queries (int): fewest queries per image (9).

    Returns:
        tuple: ``reference`` [B, T, 4] normalised cxcywh anchors (T = max(min_queries,
        min(max_pos, most positives of an image))), ``targets`` (per image ``labels``
        [P_i], ``boxes`` [P_i, 4] normalised cxcywh of the positives) and ``indices``
        (per image (query index, target index) [P_i] each: the first P_i queries are the
        positives, in order), ``chosen`` [B, T]: each query's anchor (index into A).
    """
    positive = labels < num_classes
    counts = positive.sum(1).tolist()
    T = max(min_queries, min(max_pos, max(counts, default=0)))
    reference, targets, indices, chosen = [], [], [], []
    for i, (h, w) in enumerate(img_sizes):
        pos = positive[i].nonzero().squeeze(1)
        if len(pos) > T:
            pos = pos[random_order(draws, 'aux_positives', len(pos), pos.device)[:T]]
        neg = (~positive[i]).nonzero().squeeze(1)
        neg = neg[random_order(draws, 'aux_negatives', len(neg), neg.device)[:T - len(pos)]] \
            if len(pos) < T else neg[:0]
        scale = anchors.new_tensor([w, h, w, h])
        chosen.append(torch.cat([pos, neg]))
        reference.append(box_xyxy_to_cxcywh(anchors[i, chosen[-1]] / scale))
        targets.append(dict(labels=labels[i, pos], boxes=box_xyxy_to_cxcywh(boxes[i, pos] / scale)))
        order = torch.arange(len(pos), dtype=torch.int64)
        indices.append((order, order))
    return torch.stack(reference), targets, indices, torch.stack(chosen)
