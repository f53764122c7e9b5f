"""DETR's detection head: input projection, transformer, class and box predictors.

The pieces a faster-converging variant changes are separate methods:
``build_queries`` (what enters the decoder), ``get_targets`` (ground truth in
DETR's box format) and ``loss_by_layer`` (the criterion per decoder layer).
"""
import torch
from mmengine.model import BaseModule
from mmengine.structures import InstanceData
from torch import nn

from densevit.models.layers.detr_transformer import DetrTransformer
from densevit.models.layers.mlp import MLP
from densevit.models.layers.pos_embed_builder import build_position_embedding
from densevit.registry import MODELS
from densevit.structures import box_cxcywh_to_xyxy, box_xyxy_to_cxcywh
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import at_least_fp32, run_in_fp32

from ..losses.set_criterion import num_boxes_across_ranks
from .denoising import DenoisingQueries


def boxes_to_pixels(boxes, meta, rescale=True):
    """Normalised cxcywh boxes [N, 4] -> xyxy pixels [N, 4] of the network input
    (``meta['img_shape']``), or, with ``rescale``, of the original image: divided by
    ``scale_factor`` (w, h) and clipped to ``ori_shape``."""
    h, w = meta['img_shape'][:2]
    bboxes = box_cxcywh_to_xyxy(boxes) * boxes.new_tensor([w, h, w, h])
    if rescale:
        sw, sh = meta.get('scale_factor', (1.0, 1.0))
        bboxes = bboxes / bboxes.new_tensor([sw, sh, sw, sh])
        oh, ow = meta.get('ori_shape', (h, w))[:2]
        bboxes = torch.stack([bboxes[:, 0].clamp(0, ow), bboxes[:, 1].clamp(0, oh),
                              bboxes[:, 2].clamp(0, ow), bboxes[:, 3].clamp(0, oh)], -1)
    return bboxes


def mask_inputs(queries, memory, src, mask):
    """What DETR's panoptic mask head (``DETRMaskHead``) reads of a head's forward pass:
    dict(queries [B, Q, D]: the last decoder layer's outputs of the Q matching queries,
    memory [B, D, h, w]: the encoder's output (given [B, h·w, D]), src [B, D, h, w]: the
    projected map the encoder read, mask [B, h, w] bool: True on padding)."""
    B, D, h, w = src.shape
    return dict(queries=queries, memory=memory.transpose(1, 2).reshape(B, D, h, w), src=src,
                mask=mask)


@MODELS.register_module()
class DETRHead(BaseModule):
    """DETR head on one feature map.

    Args:
        num_classes (int): K object classes; the classifier has K+1 outputs (last = no object).
        in_channels (int): channels of the feature map from the backbone / neck.
        embed_dims (int): transformer width (DETR: 256).
        num_queries (int): learned object queries (100).
        transformer (dict): kwargs of :class:`DetrTransformer` (default ``dict()``).
        positional_encoding (dict): a position-family config of type ``sine_2d``
            (the default; the only type that encodes a padding mask) with the
            kwargs of :class:`SinePositionalEncoding2D`; ``num_feats`` defaults
            to ``embed_dims // 2``. Default ``dict()``: normalised ``sine_2d``.
        criterion (dict): a ``SetCriterion`` config (``num_classes`` is filled in);
            default ``dict(type='SetCriterion')``.
        aux_loss (bool): the same losses on every decoder layer, not only the last.
        dn_cfg (dict | None): denoising training (kwargs of
            :class:`~densevit.models.heads.denoising.DenoisingQueries`, e.g.
            ``dict(label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=100)``);
            DN queries get ``tgt`` = label embedding and ``query_pos`` = MLP(sine(noised
            box)), matching queries keep the learned ``query_pos`` and zero ``tgt``.
            Their losses (``dn_loss_*``) use the fixed assignment to the GT they came from.
        num_dets (int | None): detections kept per image at prediction: None keeps every
            query in query order (DETR's evaluation); an int keeps the ``num_dets``
            best-scoring queries, highest first (MMDetection's ``test_cfg.max_per_img``).
    """

    # test-time augmentation merges this head's per-view boxes (densevit/models/tta)
    tta_merge = 'boxes'

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=100,
                 transformer=DEFAULT, positional_encoding=DEFAULT, criterion=DEFAULT,
                 aux_loss=True, dn_cfg=None, num_dets=None, init_cfg=None):
        super().__init__(init_cfg)
        transformer = resolve_default(transformer, dict())
        positional_encoding = resolve_default(positional_encoding, dict())
        criterion = resolve_default(criterion, dict(type='SetCriterion'))
        self.num_classes = num_classes
        self.num_queries = num_queries
        self.aux_loss = aux_loss
        self.num_dets = num_dets
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
        self.dn = DenoisingQueries(num_classes, embed_dims, **dn_cfg) if dn_cfg else None

    def build_denoising(self, data_samples):
        """The DN queries of a training batch (a dict, see ``DenoisingQueries``) or None
        (no ``dn_cfg``, eval mode, no ground truth)."""
        if self.dn is None or not self.training or not data_samples or \
                'gt_instances' not in data_samples[0]:
            return None
        return self.dn(self.get_targets(data_samples), self.num_queries)

    def build_queries(self, batch_size, data_samples=None):
        """Decoder inputs -> (tgt or None [B, Q', D], query_pos [B, Q', D],
        self_attn_mask [Q', Q'] or None, dn dict or None); Q' = N_dn + Q with DN queries first."""
        query_pos = self.query_embed.weight.unsqueeze(0).expand(batch_size, -1, -1)
        dn = self.build_denoising(data_samples)
        if dn is None:
            return None, query_pos, None, None
        tgt = torch.cat([dn['tgt'], query_pos.new_zeros(query_pos.shape)], 1)
        query_pos = torch.cat([dn['query_pos'], query_pos], 1)
        return tgt, query_pos, dn['attn_mask'], dn

    @staticmethod
    def split_denoising(out, dn):
        """Move the first ``dn['num_dn']`` queries of ``out`` (tensors [L, B, Q', ...]) to
        ``out['dn']`` (with the DN meta), leaving the matching queries in ``out``."""
        if dn is None:
            return out
        n = dn['num_dn']
        dn_out = {k: v[:, :, :n] for k, v in out.items()}
        out = {k: v[:, :, n:] for k, v in out.items()}
        out['dn'] = dict(dn_out, indices=dn['indices'], num_groups=dn['num_groups'])
        return out

    def forward(self, feat, mask, data_samples=None, with_mask_inputs=False):
        """feat [B, C, H, W], mask [B, H, W] bool (True = padding) ->
        dict(pred_logits [L, B, Q, K+1], pred_boxes [L, B, Q, 4] normalized cxcywh)
        for the L decoder layers; in training with ``dn_cfg`` also ``dn``: the DN
        queries' ``pred_logits`` / ``pred_boxes`` [L, B, N_dn, ...], ``indices``, ``num_groups``;
        with ``with_mask_inputs`` also ``mask_inputs`` (:func:`mask_inputs`, what DETR's
        panoptic mask head reads)."""
        src = self.input_proj(feat)
        pos = self.positional_encoding(mask).to(src.dtype).flatten(2).transpose(1, 2)
        tgt, query_pos, attn_mask, dn = self.build_queries(src.shape[0], data_samples)
        hs, memory = self.transformer(src.flatten(2).transpose(1, 2), mask.flatten(1), pos,
                                      query_pos, tgt=tgt, self_attn_mask=attn_mask)
        # the predictors run in float32 under bf16 autocast (densevit/utils/precision.py)
        out = dict(pred_logits=run_in_fp32(self.class_embed, hs),
                   pred_boxes=run_in_fp32(self.bbox_embed, hs).sigmoid())
        out = self.split_denoising(out, dn)
        if with_mask_inputs:
            first = dn['num_dn'] if dn is not None else 0
            out['mask_inputs'] = mask_inputs(hs[-1][:, first:first + self.num_queries], memory,
                                             src, mask)
        return out

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

    def loss_by_layer(self, outputs, targets, num_boxes, indices=None):
        """One decoder layer's losses: dict of scalars (``indices``: a fixed assignment)."""
        return self.criterion(outputs, targets, num_boxes, indices=indices)

    def layer_losses(self, out, targets, num_boxes, prefix=''):
        """Losses of every decoder layer in ``out`` (and of its DN queries, if any):
        the last layer unprefixed (``loss_cls``), the others ``d{i}.loss_cls``; DN
        losses ``dn_loss_cls`` / ``d{i}.dn_loss_cls``."""
        num_layers = out['pred_logits'].shape[0]
        layers = range(num_layers) if self.aux_loss else [num_layers - 1]
        dn = out.get('dn')
        losses = {}
        for i in layers:
            tag = prefix + ('' if i == num_layers - 1 else f'd{i}.')
            layer = dict(pred_logits=out['pred_logits'][i], pred_boxes=out['pred_boxes'][i])
            losses.update({tag + k: v for k, v in
                           self.loss_by_layer(layer, targets, num_boxes).items()})
            if dn is not None:
                dn_layer = dict(pred_logits=dn['pred_logits'][i], pred_boxes=dn['pred_boxes'][i])
                dn_losses = self.loss_by_layer(dn_layer, targets, num_boxes * dn['num_groups'],
                                               indices=dn['indices'])
                losses.update({tag + 'dn_' + k: v for k, v in dn_losses.items()})
        return losses

    def loss(self, feat, mask, data_samples):
        """Losses of the last decoder layer (``loss_cls`` ...) and of the others (``d{i}.loss_cls``)."""
        return self.output_losses(self(feat, mask, data_samples), data_samples)

    def output_losses(self, out, data_samples):
        """:meth:`loss` of the head's outputs ``out`` (its ``forward``'s dict)."""
        targets = self.get_targets(data_samples)
        num_boxes = num_boxes_across_ranks(targets, out['pred_logits'].device)
        return self.layer_losses(out, targets, num_boxes)

    def predict(self, feat, mask, data_samples, rescale=True):
        """Detections per image, no threshold: every query (as DETR evaluates) or the
        best ``num_dets``.

        Returns:
            list[InstanceData]: ``bboxes`` [N, 4] xyxy pixels (of the original image when
            ``rescale``, else of ``img_shape``), ``scores`` [N], ``labels`` [N];
            N = Q, or ``min(num_dets, Q)`` sorted by score.
        """
        out = self(feat, mask, data_samples)
        logits, boxes = out['pred_logits'][-1], out['pred_boxes'][-1]
        return [self.postprocess(lg, bx, ds.metainfo, rescale)
                for lg, bx, ds in zip(logits, boxes, data_samples, strict=True)]

    def postprocess(self, logits, boxes, meta, rescale=True):
        """logits [Q, K+1], boxes [Q, 4] normalized cxcywh -> InstanceData in pixels
        (softmax over K+1, best of the K object classes; top ``num_dets`` if set), in
        float32 at least whatever the model's precision; ``queries`` [N]: the decoder
        query of each detection (for attention maps)."""
        logits, boxes = at_least_fp32(logits), at_least_fp32(boxes)
        scores, labels = logits.softmax(-1)[:, :-1].max(-1)
        queries = torch.arange(len(scores), device=scores.device)
        if self.num_dets is not None:
            scores, queries = scores.topk(min(self.num_dets, len(scores)))
            labels, boxes = labels[queries], boxes[queries]
        return InstanceData(bboxes=boxes_to_pixels(boxes, meta, rescale), scores=scores,
                            labels=labels, queries=queries)
