"""DETR's set prediction loss (Carion et al. 2020, §3.1, Eq. 2)."""
import torch
import torch.nn.functional as F
from mmengine.dist import all_reduce, get_world_size
from torch import nn

from densevit.registry import MODELS, TASK_UTILS
from densevit.structures import aligned_box_iou, box_cxcywh_to_xyxy, generalized_box_iou
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import at_least_fp32

from .quality_focal_loss import quality_focal_loss


def mean_across_ranks(value):
    """A float tensor averaged over processes, in place (itself in one process)."""
    if get_world_size() > 1:
        all_reduce(value, op='mean')
    return value


def num_boxes_across_ranks(targets, device):
    """Target boxes in the batch averaged over processes, at least 1 (DETR's normalizer)."""
    n = torch.tensor(float(sum(len(t['labels']) for t in targets)), device=device)
    return mean_across_ranks(n).clamp(min=1).item()


def sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0):
    """Focal loss (Lin et al. 2017) per element: logits, targets [...] (targets in {0, 1})
    -> [...]; α weighs positives, 1 − α negatives (α < 0: no weighting)."""
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction='none')
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (alpha * targets + (1 - alpha) * (1 - targets))
    return loss


def matched_queries(indices):
    """(image index, query index) [M] each of the matched predictions of a batch, image by
    image in the matcher's order."""
    batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
    return batch_idx, torch.cat([src for src, _ in indices])


def matched_classes(logits, indices, targets, num_classes):
    """[B, Q] class targets of every query: its matched target's ``labels`` entry, or
    ``num_classes`` (no object) for an unmatched query; ``logits`` [B, Q, ...] give the
    shape and device."""
    target_classes = torch.full(logits.shape[:2], num_classes, dtype=torch.int64,
                                device=logits.device)
    target_classes[matched_queries(indices)] = torch.cat(
        [t['labels'][j] for t, (_, j) in zip(targets, indices, strict=True)]).to(logits.device)
    return target_classes


def no_object_cross_entropy(logits, target_classes, no_object_weight):
    """Softmax cross-entropy over K+1 classes, logits [B, Q, K+1] against [B, Q], every class
    weighted 1 and "no object" (index K) ``no_object_weight``; the weighted mean (divided by
    the summed weights of the targets, PyTorch's rule)."""
    # class weights made in the logits' dtype: no buffer for model.to(dtype) to round
    class_weight = logits.new_ones(logits.shape[-1])
    class_weight[-1] = no_object_weight
    # as [B*Q, C+1] rows: CUDA's 2D (per-position) kernel has no deterministic
    # reduction, and tools/train.py's deterministic runs refuse it
    return F.cross_entropy(logits.flatten(0, 1), target_classes.flatten(), class_weight)


@MODELS.register_module()
class SetCriterion(nn.Module):
    """Hungarian-matched classification + box losses for one decoder layer's predictions.

    Classification: cross-entropy over K+1 classes (index K = no object) for every
    query, the no-object class weighted ``no_object_weight``, as a weighted mean.
    Boxes: L1 and 1 − GIoU over matched pairs, summed and divided by ``num_boxes``.

    Args:
        num_classes (int): K.
        matcher (dict): a ``TASK_UTILS`` config; default ``dict(type='HungarianMatcher')``.
        loss_weights (dict): ``loss_cls``, ``loss_bbox``, ``loss_iou``; default DETR's
            ``dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0)``.
        no_object_weight (float): class weight of "no object" (0.1).
        use_focal (bool): sigmoid focal loss over K logits instead (Deformable DETR;
            ``pred_logits`` [B, Q, K], "no object" = all-zero target), summed over
            queries and classes and divided by ``num_boxes``.
        focal_alpha, focal_gamma (float): focal loss α (0.25) and γ (2).
        quality_focal (bool): with ``use_focal``, the quality focal loss instead
            (:func:`~densevit.models.losses.quality_focal_loss.quality_focal_loss`, Co-DINO's):
            a matched query's target at its class is the IoU of its (detached) box with the
            target box, the modulating exponent is ``focal_gamma`` (its β), no α; same
            normalizer.
    """

    def __init__(self, num_classes, matcher=DEFAULT, loss_weights=DEFAULT,
                 no_object_weight=0.1, use_focal=False, focal_alpha=0.25, focal_gamma=2.0,
                 quality_focal=False):
        super().__init__()
        matcher = resolve_default(matcher, dict(type='HungarianMatcher'))
        loss_weights = resolve_default(loss_weights,
                                       dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0))
        self.num_classes = num_classes
        self.use_focal = use_focal
        if quality_focal and not use_focal:
            raise ValueError('SetCriterion: quality_focal=True needs use_focal=True (sigmoid '
                             'logits)')
        self.quality_focal = quality_focal
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma
        self.matcher = TASK_UTILS.build(matcher)
        self.loss_weights = dict(loss_weights)
        self.no_object_weight = no_object_weight

    def forward(self, outputs, targets, num_boxes, indices=None):
        """Weighted losses of one layer.

        Args:
            outputs (dict): ``pred_logits`` [B, Q, K+1], ``pred_boxes`` [B, Q, 4] normalized cxcywh.
            targets (list[dict]): ``labels`` [N_i], ``boxes`` [N_i, 4] normalized cxcywh.
            num_boxes (float): normalizer of the box losses.
            indices (list[tuple]): a precomputed assignment (e.g. denoising queries); matched
                here when None.

        Returns:
            dict: ``loss_cls``, ``loss_bbox``, ``loss_iou`` (already weighted).
        """
        if indices is None:
            indices = self.matcher(outputs, targets)
        # losses in float32 at least: bf16 / fp16 logits raised, a float64 model stays float64
        logits = at_least_fp32(outputs['pred_logits'])
        boxes = at_least_fp32(outputs['pred_boxes'])
        batch_idx, src_idx = matched_queries(indices)
        target_classes = matched_classes(logits, indices, targets, self.num_classes)
        src_boxes = boxes[batch_idx, src_idx]
        tgt_boxes = torch.cat(
            [t['boxes'][j] for t, (_, j) in zip(targets, indices, strict=True)]).to(src_boxes)
        if self.use_focal:
            onehot = F.one_hot(target_classes, self.num_classes + 1)[..., :-1].to(logits.dtype)
            if self.quality_focal:
                quality = logits.new_zeros(logits.shape[:2])
                quality[batch_idx, src_idx] = aligned_box_iou(
                    box_cxcywh_to_xyxy(src_boxes.detach()), box_cxcywh_to_xyxy(tgt_boxes),
                    eps=1e-6)
                loss_cls = quality_focal_loss(logits, onehot * quality[..., None],
                                              self.focal_gamma)
            else:
                loss_cls = sigmoid_focal_loss(logits, onehot, self.focal_alpha,
                                              self.focal_gamma)
            loss_cls = loss_cls.sum() / num_boxes
        else:
            loss_cls = no_object_cross_entropy(logits, target_classes, self.no_object_weight)

        loss_bbox = F.l1_loss(src_boxes, tgt_boxes, reduction='sum') / num_boxes
        giou = torch.diag(generalized_box_iou(box_cxcywh_to_xyxy(src_boxes),
                                              box_cxcywh_to_xyxy(tgt_boxes)))
        loss_iou = (1 - giou).sum() / num_boxes
        w = self.loss_weights
        return dict(loss_cls=loss_cls * w['loss_cls'], loss_bbox=loss_bbox * w['loss_bbox'],
                    loss_iou=loss_iou * w['loss_iou'])
