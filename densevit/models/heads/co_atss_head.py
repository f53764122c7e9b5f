"""Co-DETR's collaborative ATSS head (Zong et al. 2023, "DETRs with Collaborative Hybrid
Assignments Training", §3.2): an auxiliary one-to-many head on the DETR encoder's maps.

The head is ATSS's (Zhang et al. 2020): per level a stack of 3×3 convolution + GroupNorm +
ReLU for each of a classification and a regression branch, then 3×3 convolutions to K class
logits, 4 box deltas (times a learned scale per level) and one centerness logit per
location. One square anchor per location, of side ``anchor_scale`` × the level's stride,
centred on the location's top-left pixel (x·stride, y·stride). Training: ATSS assignment
(:class:`~densevit.models.task_modules.atss_assigner.ATSSAssigner`), sigmoid focal loss
on every anchor, GIoU loss of the decoded positive boxes weighted by their centerness
target, and binary cross-entropy of the centerness logit against that target.

In Co-DETR the head reads the encoder's memory reshaped to the L level maps plus one more
level made by a 3×3 stride-2 convolution + GroupNorm of the coarsest (:func:`memory_to_maps`
gives the first L), and its positives (anchors, labels, target boxes) become extra groups
of decoder queries (:class:`~densevit.models.heads.co_dino_head.CoDINOHead`; see
docs/detr_family.md).
"""
import math

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule, Scale
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.own_init import ResetAfterChildrenInit
from densevit.models.losses.set_criterion import mean_across_ranks, sigmoid_focal_loss
from densevit.registry import MODELS, TASK_UTILS
from densevit.structures import aligned_generalized_box_iou, box_centers, decode_deltas
from densevit.utils.defaults import DEFAULT, resolve_default

# Co-DINO's weights: 1 (focal), 2 (GIoU), 1 (centerness), each x 6 decoder layers x λ = 2
CO_DINO_LOSS_WEIGHTS = dict(loss_cls=12.0, loss_bbox=24.0, loss_centerness=12.0)
FLOAT32_EPS = torch.finfo(torch.float32).eps


def memory_to_maps(memory, shapes):
    """Encoder memory [B, S, D] with level shapes (h, w; S = Σ h·w), a [L, 2] tensor or a
    list of pairs -> L maps [B, D, h, w]."""
    maps, start = [], 0
    for h, w in (shapes.tolist() if torch.is_tensor(shapes) else shapes):
        maps.append(memory[:, start:start + h * w].transpose(1, 2).reshape(
            memory.shape[0], memory.shape[2], h, w))
        start += h * w
    return maps


def centerness_target(anchors, boxes):
    """ATSS's centerness of each anchor's centre in its target box: anchors, boxes [P, 4]
    xyxy -> [P] sqrt(min(l, r) / max(l, r) · min(t, b) / max(t, b))."""
    xy = box_centers(anchors)
    lr = torch.stack([xy[:, 0] - boxes[:, 0], boxes[:, 2] - xy[:, 0]], 1)
    tb = torch.stack([xy[:, 1] - boxes[:, 1], boxes[:, 3] - xy[:, 1]], 1)
    return torch.sqrt(lr.min(1)[0] / lr.max(1)[0] * (tb.min(1)[0] / tb.max(1)[0]))


@MODELS.register_module()
class CoATSSHead(ResetAfterChildrenInit, BaseModule):
    """ATSS head on L' maps, as Co-DETR's auxiliary head.

    Args:
        num_classes (int): K (sigmoid classifier).
        in_channels (int): the maps' channels (the DETR's D, 256).
        feat_channels (int): the branches' channels (256).
        stacked_convs (int): convolutions per branch (1 in Co-DETR; 4 in ATSS).
        strides (tuple[int]): each map's stride in pixels (Co-DINO 5-scale:
            (4, 8, 16, 32, 64, 128)); one map per stride.
        anchor_scale (float): an anchor's side in strides (8).
        box_stds (tuple): the deltas' scale (see :func:`densevit.structures.decode_deltas`).
        norm_groups (int): GroupNorm groups of the branches (32).
        assigner (dict): a ``TASK_UTILS`` config (``dict(type='ATSSAssigner', topk=9)``).
        loss_weights (dict): ``loss_cls``, ``loss_bbox``, ``loss_centerness``; default
            :data:`CO_DINO_LOSS_WEIGHTS` (12, 24, 12).
        focal_alpha, focal_gamma (float): the focal loss' α (0.25) and γ (2).
    """

    def __init__(self, num_classes, in_channels=256, feat_channels=256, stacked_convs=1,
                 strides=(4, 8, 16, 32, 64, 128), anchor_scale=8.0,
                 box_stds=(0.1, 0.1, 0.2, 0.2), norm_groups=32, assigner=DEFAULT,
                 loss_weights=DEFAULT, focal_alpha=0.25, focal_gamma=2.0, init_cfg=None):
        super().__init__(init_cfg)
        assigner = resolve_default(assigner, dict(type='ATSSAssigner', topk=9))
        self.loss_weights = dict(resolve_default(loss_weights, CO_DINO_LOSS_WEIGHTS))
        self.num_classes, self.strides = num_classes, tuple(strides)
        self.anchor_scale, self.box_stds = anchor_scale, tuple(box_stds)
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma
        self.assigner = TASK_UTILS.build(assigner)
        norm_cfg = dict(type='GN', num_groups=norm_groups, requires_grad=True)

        def branch():
            return nn.ModuleList(
                ConvModule(in_channels if i == 0 else feat_channels, feat_channels, 3,
                           padding=1, norm_cfg=norm_cfg) for i in range(stacked_convs))
        self.cls_convs, self.reg_convs = branch(), branch()
        self.atss_cls = nn.Conv2d(feat_channels, num_classes, 3, padding=1)
        self.atss_reg = nn.Conv2d(feat_channels, 4, 3, padding=1)
        self.atss_centerness = nn.Conv2d(feat_channels, 1, 3, padding=1)
        self.scales = nn.ModuleList(Scale(1.0) for _ in self.strides)
        self._reset_parameters()

    def _reset_parameters(self):
        """Every convolution N(0, 0.01) with zero bias; the class bias at prior 0.01."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.01)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.constant_(self.atss_cls.bias, -math.log((1 - 0.01) / 0.01))

    def forward(self, feats):
        """feats: L' maps [B, C, H_l, W_l] (one per stride) -> (class logits [B, K, H_l, W_l],
        box deltas [B, 4, H_l, W_l], centerness logits [B, 1, H_l, W_l]), each a list over
        the levels."""
        if len(feats) != len(self.strides):
            raise ValueError(f'CoATSSHead: {len(feats)} maps for {len(self.strides)} strides '
                             f'{self.strides}')
        logits, deltas, centerness = [], [], []
        for x, scale in zip(feats, self.scales, strict=True):
            c = r = x
            for conv in self.cls_convs:
                c = conv(c)
            for conv in self.reg_convs:
                r = conv(r)
            logits.append(self.atss_cls(c))
            deltas.append(scale(self.atss_reg(r)))
            centerness.append(self.atss_centerness(r))
        return logits, deltas, centerness

    def anchors(self, sizes, device, dtype=torch.float32):
        """Level sizes [(h, w)] -> per level [h·w, 4] xyxy pixel anchors, row by row (the
        order of a map's flattened locations)."""
        out = []
        for (h, w), s in zip(sizes, self.strides, strict=True):
            ys, xs = torch.meshgrid(torch.arange(h, device=device, dtype=dtype) * s,
                                    torch.arange(w, device=device, dtype=dtype) * s,
                                    indexing='ij')
            xy = torch.stack([xs.flatten(), ys.flatten()], -1)
            half = self.anchor_scale * s / 2
            out.append(torch.cat([xy - half, xy + half], -1))
        return out

    def assign(self, anchors, num_level_anchors, gt_boxes, gt_labels):
        """One image: anchors [A, 4], gt_boxes [G, 4] xyxy, gt_labels [G] -> (assigned [A]
        gt index or -1, labels [A] (K: background), target boxes [A, 4] (0 for negatives))."""
        assigned, _ = self.assigner(anchors, num_level_anchors, gt_boxes.to(anchors))
        positive = assigned >= 0
        labels = torch.full_like(assigned, self.num_classes)
        labels[positive] = gt_labels.to(labels.device)[assigned[positive]]
        boxes = torch.zeros_like(anchors)
        boxes[positive] = gt_boxes.to(anchors)[assigned[positive]]
        return assigned, labels, boxes

    def valid_anchors(self, sizes, img_size, device):
        """Level sizes [(h, w)], one image's (h, w) -> [A] bool: the anchors whose location
        lies on the image, ⌈h / stride⌉ rows and ⌈w / stride⌉ columns of each level (the
        rest cover batch padding; MMDetection's valid flags)."""
        out = []
        for (h, w), s in zip(sizes, self.strides, strict=True):
            rows = torch.arange(h, device=device) < math.ceil(img_size[0] / s)
            cols = torch.arange(w, device=device) < math.ceil(img_size[1] / s)
            out.append((rows[:, None] & cols[None]).flatten())
        return torch.cat(out)

    def targets(self, sizes, gt_boxes, gt_labels, device, dtype=torch.float32, img_sizes=None):
        """Per image ground truth (boxes [G_i, 4] xyxy pixels, labels [G_i]) -> dict of
        ``anchors`` [A, 4] (all levels), ``num_level_anchors`` list[int], ``valid`` [B, A]
        (:meth:`valid_anchors` of each of ``img_sizes``, (h, w) per image; None: every
        anchor), ``assigned`` / ``labels`` [B, A], ``boxes`` [B, A, 4] (the positives' target
        boxes): the positive coordinates Co-DETR turns into queries. Only valid anchors
        are assigned (ATSS's candidates per level among them); the others are background."""
        per_level = self.anchors(sizes, device, dtype)
        anchors, counts = torch.cat(per_level), [len(a) for a in per_level]
        B, A = len(gt_boxes), len(anchors)
        valid = torch.ones(B, A, dtype=torch.bool, device=device) if img_sizes is None else \
            torch.stack([self.valid_anchors(sizes, s, device) for s in img_sizes])
        assigned = torch.full((B, A), -1, dtype=torch.long, device=device)
        labels = torch.full((B, A), self.num_classes, dtype=torch.long, device=device)
        boxes = anchors.new_zeros(B, A, 4)
        for i, (b, c) in enumerate(zip(gt_boxes, gt_labels, strict=True)):
            v = valid[i]
            level_counts = [int(x.sum()) for x in v.split(counts)]
            assigned[i, v], labels[i, v], boxes[i, v] = self.assign(anchors[v], level_counts, b, c)
        return dict(anchors=anchors, num_level_anchors=counts, valid=valid, assigned=assigned,
                    labels=labels, boxes=boxes)

    def level_losses(self, outs, gt_boxes, gt_labels, img_sizes=None):
        """Losses of every level (weighted) and the targets.

        Args:
            outs (tuple): :meth:`forward`'s outputs.
            gt_boxes (list[Tensor]): per image [G_i, 4] xyxy pixels of the padded batch.
            gt_labels (list[Tensor]): per image [G_i].
            img_sizes (list[tuple] | None): per image (h, w) in the padded batch; anchors
                off the image take no part (see :meth:`targets`). None: every anchor.

        Returns:
            tuple[dict, dict]: ``loss_cls``, ``loss_bbox``, ``loss_centerness``, each a list
            over levels: the focal loss over all valid anchors and classes and the centerness
            loss, both divided by the positives (each image counting at least one, averaged
            over processes), and the GIoU loss weighted by the centerness targets, divided
            by their sum (at least 1); and :meth:`targets`.
        """
        logits, deltas, centerness = outs
        B, K = logits[0].shape[0], self.num_classes
        dtype = torch.promote_types(logits[0].dtype, torch.float32)
        tg = self.targets([x.shape[-2:] for x in logits], gt_boxes, gt_labels,
                          logits[0].device, dtype, img_sizes)
        positives = (tg['labels'] < K).sum(1).clamp(min=1).sum().to(dtype)
        num_pos = mean_across_ranks(positives).item()
        losses = dict(loss_cls=[], loss_bbox=[], loss_centerness=[])
        ctr_sums, start = [], 0
        for lvl, n in enumerate(tg['num_level_anchors']):
            labels = tg['labels'][:, start:start + n].reshape(-1)
            valid = tg['valid'][:, start:start + n].reshape(-1, 1).to(dtype)
            boxes = tg['boxes'][:, start:start + n].reshape(-1, 4)
            anchors = tg['anchors'][start:start + n].repeat(B, 1)
            start += n
            cls = logits[lvl].permute(0, 2, 3, 1).reshape(-1, K).to(dtype)
            delta = deltas[lvl].permute(0, 2, 3, 1).reshape(-1, 4).to(dtype)
            ctr = centerness[lvl].permute(0, 2, 3, 1).reshape(-1).to(dtype)
            onehot = F.one_hot(labels, K + 1)[:, :K].to(dtype)
            focal = sigmoid_focal_loss(cls, onehot, self.focal_alpha, self.focal_gamma) * valid
            losses['loss_cls'].append(focal.sum() / (num_pos + FLOAT32_EPS))
            pos = labels < K
            if pos.any():
                target = centerness_target(anchors[pos], boxes[pos])
                pred = decode_deltas(anchors[pos], delta[pos], self.box_stds)
                giou = aligned_generalized_box_iou(pred, boxes[pos], eps=1e-6)
                losses['loss_bbox'].append(((1 - giou) * target).sum())
                losses['loss_centerness'].append(F.binary_cross_entropy_with_logits(
                    ctr[pos], target, reduction='sum') / (num_pos + FLOAT32_EPS))
                ctr_sums.append(target.sum())
            else:  # zero, joined to the graph
                losses['loss_bbox'].append(delta.sum() * 0)
                losses['loss_centerness'].append(ctr.sum() * 0)
        norm = sum(ctr_sums) if ctr_sums else torch.zeros((), dtype=dtype,
                                                           device=logits[0].device)
        norm = mean_across_ranks(torch.as_tensor(norm).detach().clone()).clamp(min=1).item()
        losses['loss_bbox'] = [x / norm for x in losses['loss_bbox']]
        losses = {k: [x * self.loss_weights[k] for x in v] for k, v in losses.items()}
        return losses, tg

    def loss(self, outs, gt_boxes, gt_labels, img_sizes=None):
        """The weighted losses summed over levels (dict of scalars) and :meth:`targets`."""
        losses, tg = self.level_losses(outs, gt_boxes, gt_labels, img_sizes)
        return {k: sum(v) for k, v in losses.items()}, tg
