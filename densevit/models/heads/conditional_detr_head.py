"""Conditional DETR's head (Meng et al. 2021): DETR's single-map head with the conditional
decoder, a sigmoid (focal-loss) classifier and boxes predicted relative to each query's
reference point.

Targets, the loss loop over decoder layers and the criterion (``SetCriterion`` with
``use_focal``) are DETRHead's; the top-k post-processing is DeformableDETRHead's.
"""
import math

import torch
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.conditional_detr_transformer import ConditionalDetrTransformer
from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.models.layers.mlp import MLP
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import run_in_fp32

from .deformable_detr_head import DeformableDETRHead
from .detr_head import DETRHead


def focal_criterion(cls_weight):
    """The papers' set criterion: sigmoid focal loss (α 0.25, γ 2) weighted ``cls_weight``,
    L1 5, GIoU 2; matcher costs focal class 2, L1 5, GIoU 2."""
    return dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0, cost_bbox=5.0,
                             cost_giou=2.0),
                loss_weights=dict(loss_cls=cls_weight, loss_bbox=5.0, loss_iou=2.0))


@MODELS.register_module()
class ConditionalDETRHead(DETRHead):
    """Conditional DETR head on one feature map (the ``DETR`` detector's).

    Args:
        num_classes (int): K (sigmoid classifier: K outputs, no "no object" logit).
        in_channels (int): channels of the backbone / neck map.
        embed_dims (int): D (256). num_queries (int): Q (300).
        transformer (dict): kwargs of :class:`ConditionalDetrTransformer` (default ``dict()``).
        positional_encoding (dict): kwargs of :class:`SinePositionalEncoding2D` (default
            ``dict()``: D / 2 features per axis, normalised, temperature 10000).
        criterion (dict): a ``SetCriterion`` config; default :func:`focal_criterion` with
            class weight 2 (the paper's).
        aux_loss (bool): losses on every decoder layer (``d{i}.loss_*``).
        num_dets (int): detections per image: top-k (query, class) pairs by sigmoid
            score (100).
    """

    transformer_type = ConditionalDetrTransformer
    default_cls_weight = 2.0
    default_temperature = 10000
    # top-k over queries x classes, as Deformable DETR (one query may give several classes)
    postprocess = DeformableDETRHead.postprocess

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=300,
                 transformer=DEFAULT, positional_encoding=DEFAULT, criterion=DEFAULT,
                 aux_loss=True, num_dets=100, init_cfg=None):
        BaseModule.__init__(self, init_cfg)  # DETRHead's own layers are not built
        transformer = resolve_default(transformer, dict())
        positional_encoding = resolve_default(positional_encoding, dict())
        criterion = resolve_default(criterion, focal_criterion(self.default_cls_weight))
        self.num_classes, self.num_queries = num_classes, num_queries
        self.aux_loss, self.num_dets = aux_loss, num_dets
        self.input_proj = nn.Conv2d(in_channels, embed_dims, kernel_size=1)
        self.transformer = self.transformer_type(embed_dims=embed_dims, **transformer)
        pe = {'num_feats': embed_dims // 2, 'temperature': self.default_temperature,
              'normalize': True, **positional_encoding}
        self.positional_encoding = SinePositionalEncoding2D(**pe)
        self.init_queries(num_queries, embed_dims)
        self.class_embed = nn.Linear(embed_dims, num_classes)
        self.bbox_embed = MLP(embed_dims, embed_dims, 4, 3)
        self.criterion = MODELS.build(dict(criterion, num_classes=num_classes))
        self.dn = None  # no denoising queries
        nn.init.constant_(self.class_embed.bias, -math.log((1 - 0.01) / 0.01))  # prior 0.01
        nn.init.zeros_(self.bbox_embed.layers[-1].weight)
        nn.init.zeros_(self.bbox_embed.layers[-1].bias)

    def init_queries(self, num_queries, embed_dims):
        """The learned object queries (positional queries) [Q, D]."""
        self.query_embed = nn.Embedding(num_queries, embed_dims)

    def decode(self, src, mask, pos):
        """src, pos [B, N, D], mask [B, N] -> (hs [L, B, Q, D], reference [B, Q, 2])."""
        query_pos = self.query_embed.weight.unsqueeze(0).expand(src.shape[0], -1, -1)
        return self.transformer(src, mask, pos, query_pos)

    def forward(self, feat, mask, data_samples=None):
        """feat [B, C, H, W], mask [B, H, W] bool (True = padding) ->
        dict(pred_logits [L, B, Q, K], pred_boxes [L, B, Q, 4] normalised cxcywh) for the
        L decoder layers: box = sigmoid(Δ + sigmoid⁻¹(reference)) on the reference's
        coordinates (x, y here; x, y, w, h for DAB-DETR's anchors)."""
        src = self.input_proj(feat)
        pos = self.positional_encoding(mask).to(src.dtype).flatten(2).transpose(1, 2)
        hs, reference = self.decode(src.flatten(2).transpose(1, 2), mask.flatten(1), pos)
        logits = run_in_fp32(self.class_embed, hs)
        delta = run_in_fp32(self.bbox_embed, hs)
        ref = inverse_sigmoid(reference).to(delta.dtype)
        d = ref.shape[-1]
        boxes = torch.cat([delta[..., :d] + ref, delta[..., d:]], -1).sigmoid()
        return dict(pred_logits=logits, pred_boxes=boxes)
