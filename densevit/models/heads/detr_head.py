"""DETR's detection head: input projection, transformer, class and box predictors.

The pieces a faster-converging variant changes are separate methods:
``build_queries`` (what enters the decoder), ``get_targets`` (ground truth in
DETR's box format) and ``loss_by_layer`` (the criterion per decoder layer).
"""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmengine.structures import InstanceData
from torch import nn

from densevit.models.layers.detr_transformer import DetrTransformer
from densevit.models.layers.pos_embed_builder import build_position_embedding
from densevit.registry import MODELS
from densevit.structures import box_cxcywh_to_xyxy, box_xyxy_to_cxcywh

from ..losses.set_criterion import num_boxes_across_ranks


class MLP(nn.Module):
    """``num_layers`` Linear layers with ReLU between them (DETR's box predictor: 3 layers)."""

    def __init__(self, in_dims, hidden_dims, out_dims, num_layers):
        super().__init__()
        dims = [in_dims] + [hidden_dims] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in zip(dims, dims[1:] + [out_dims]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


@MODELS.register_module()
class DETRHead(BaseModule):
    """DETR head on one feature map.

    Args:
        num_classes (int): K object classes; the classifier has K+1 outputs (last = no object).
        in_channels (int): channels of the feature map from the backbone / neck.
        embed_dims (int): transformer width (DETR: 256).
        num_queries (int): learned object queries (100).
        transformer (dict): kwargs of :class:`DetrTransformer`.
        positional_encoding (dict): a position-family config of type ``sine_2d``
            (the default; the only type that encodes a padding mask) with the
            kwargs of :class:`SinePositionalEncoding2D`; ``num_feats`` defaults
            to ``embed_dims // 2``.
        criterion (dict): a ``SetCriterion`` config (``num_classes`` is filled in).
        aux_loss (bool): the same losses on every decoder layer, not only the last.
    """

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=100,
                 transformer=dict(), positional_encoding=dict(),
                 criterion=dict(type='SetCriterion'), aux_loss=True, init_cfg=None):
        super().__init__(init_cfg)
        self.num_classes = num_classes
        self.num_queries = num_queries
        self.aux_loss = aux_loss
        self.input_proj = nn.Conv2d(in_channels, embed_dims, kernel_size=1)
        self.transformer = DetrTransformer(embed_dims=embed_dims, **transformer)
        pe_cfg = {'type': 'sine_2d', 'normalize': True, **positional_encoding}
        if pe_cfg['type'] != 'sine_2d':
            raise ValueError(f"DETRHead.positional_encoding must be of type 'sine_2d' (it encodes "
                             f"the padding mask), got {pe_cfg['type']!r}")
        self.positional_encoding = build_position_embedding(pe_cfg, embed_dims)
        self.query_embed = nn.Embedding(num_queries, embed_dims)
        self.class_embed = nn.Linear(embed_dims, num_classes + 1)
        self.bbox_embed = MLP(embed_dims, embed_dims, 4, 3)
        self.criterion = MODELS.build(dict(criterion, num_classes=num_classes))

    def build_queries(self, batch_size, data_samples=None):
        """Decoder inputs -> (tgt or None [B, Q, D], query_pos [B, Q, D], self_attn_mask or None)."""
        query_pos = self.query_embed.weight.unsqueeze(0).expand(batch_size, -1, -1)
        return None, query_pos, None

    def forward(self, feat, mask, data_samples=None):
        """feat [B, C, H, W], mask [B, H, W] bool (True = padding) ->
        dict(pred_logits [L, B, Q', K+1], pred_boxes [L, B, Q', 4] normalized cxcywh)
        for the L decoder layers (Q' = Q plus any extra query groups)."""
        src = self.input_proj(feat)
        pos = self.positional_encoding(mask).to(src.dtype).flatten(2).transpose(1, 2)
        tgt, query_pos, attn_mask = self.build_queries(src.shape[0], data_samples)
        hs, _ = self.transformer(src.flatten(2).transpose(1, 2), mask.flatten(1), pos, query_pos,
                                 tgt=tgt, self_attn_mask=attn_mask)
        return dict(pred_logits=self.class_embed(hs), pred_boxes=self.bbox_embed(hs).sigmoid())

    def get_targets(self, data_samples):
        """Ground truth per image: ``labels`` [N], ``boxes`` [N, 4] cxcywh normalized by the
        unpadded ``img_shape`` (h, w)."""
        targets = []
        for ds in data_samples:
            h, w = ds.metainfo['img_shape'][:2]
            boxes = ds.gt_instances.bboxes
            scale = boxes.new_tensor([w, h, w, h])
            targets.append(dict(labels=ds.gt_instances.labels.long(),
                                boxes=box_xyxy_to_cxcywh(boxes.float()) / scale))
        return targets

    def loss_by_layer(self, outputs, targets, num_boxes):
        """One decoder layer's losses: dict of scalars."""
        return self.criterion(outputs, targets, num_boxes)

    def loss(self, feat, mask, data_samples):
        """Losses of the last decoder layer (``loss_cls`` ...) and of the others (``d{i}.loss_cls``)."""
        out = self(feat, mask, data_samples)
        targets = self.get_targets(data_samples)
        num_boxes = num_boxes_across_ranks(targets, feat.device)
        num_layers = out['pred_logits'].shape[0]
        layers = range(num_layers) if self.aux_loss else [num_layers - 1]
        losses = {}
        for i in layers:
            layer_losses = self.loss_by_layer(
                dict(pred_logits=out['pred_logits'][i], pred_boxes=out['pred_boxes'][i]),
                targets, num_boxes)
            prefix = '' if i == num_layers - 1 else f'd{i}.'
            losses.update({prefix + k: v for k, v in layer_losses.items()})
        return losses

    def predict(self, feat, mask, data_samples, rescale=True):
        """Detections per image (all queries, no threshold, as DETR evaluates).

        Returns:
            list[InstanceData]: ``bboxes`` [Q, 4] xyxy pixels (of the original image when
            ``rescale``, else of ``img_shape``), ``scores`` [Q], ``labels`` [Q].
        """
        out = self(feat, mask, data_samples)
        logits, boxes = out['pred_logits'][-1], out['pred_boxes'][-1]
        return [self.postprocess(lg, bx, ds.metainfo, rescale)
                for lg, bx, ds in zip(logits, boxes, data_samples)]

    def postprocess(self, logits, boxes, meta, rescale=True):
        """logits [Q, K+1], boxes [Q, 4] normalized cxcywh -> InstanceData in pixels."""
        scores, labels = logits.softmax(-1)[:, :-1].max(-1)
        h, w = meta['img_shape'][:2]
        bboxes = box_cxcywh_to_xyxy(boxes) * boxes.new_tensor([w, h, w, h])
        if rescale:
            sw, sh = meta.get('scale_factor', (1.0, 1.0))
            bboxes = bboxes / bboxes.new_tensor([sw, sh, sw, sh])
            oh, ow = meta.get('ori_shape', (h, w))[:2]
            bboxes = torch.stack([bboxes[:, 0].clamp(0, ow), bboxes[:, 1].clamp(0, oh),
                                  bboxes[:, 2].clamp(0, ow), bboxes[:, 3].clamp(0, oh)], -1)
        result = InstanceData()
        result.bboxes, result.scores, result.labels = bboxes, scores, labels
        return result
