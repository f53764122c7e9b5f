"""Deformable DETR's head (Zhu et al. 2021): per-level input projections, deformable
transformer, sigmoid classifier, box predictor relative to reference points.

Shares DETRHead's targets, losses (with ``use_focal`` in SetCriterion), denoising
and detector interface; what differs is the multi-scale input, the decoder's
reference points, the top-k post-processing and the optional two-stage variant.
"""
import copy
import math

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmengine.structures import InstanceData
from torch import nn

from densevit.models.layers.deformable_detr_transformer import (
    DeformableDetrTransformer,
    inverse_sigmoid,
)
from densevit.models.layers.mlp import MLP
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import at_least_fp32, run_in_fp32

from .denoising import DenoisingQueries
from .detr_head import DETRHead, boxes_to_pixels
from .encoder_proposals import EncoderProposals


@MODELS.register_module()
class DeformableDETRHead(DETRHead):
    """Deformable DETR head on L feature levels.

    Args:
        num_classes (int): K (sigmoid classifier: K outputs, no "no object" logit).
        in_channels (list[int]): channels of the maps from the backbone / neck.
        embed_dims (int): D (256). num_queries (int): 300.
        num_feature_levels (int): L (4); levels beyond ``len(in_channels)`` are made by
            3×3 stride-2 convolutions (the first from the last input map).
        transformer (dict): kwargs of :class:`DeformableDetrTransformer` (default ``dict()``).
        positional_encoding (dict): kwargs of :class:`SinePositionalEncoding2D`
            (default ``dict()``: normalised, offset −0.5, as Deformable DETR).
        criterion (dict): a ``SetCriterion`` config (default
            ``dict(type='SetCriterion', use_focal=True)``, as the paper).
        with_box_refine (bool): iterative bounding box refinement (§4.2), one class/box
            predictor per decoder layer; otherwise one shared predictor.
        as_two_stage (bool): two-stage Deformable DETR (needs ``with_box_refine``): every
            encoder pixel predicts a box with an extra class / box predictor (index N of
            ``class_embed`` / ``bbox_embed``); the top ``num_queries`` by the first class
            logit become the decoder's reference boxes and, embedded, its queries (no
            learned ``query_embed`` / ``reference_points``). Training adds the encoder
            boxes' losses (``enc_loss_*``, class-agnostic: every object is class 0).
        num_dets (int): detections kept per image: top-k over queries × classes (100).
        norm_groups (int): GroupNorm groups of the input projections (32).
        dn_cfg (dict | None): denoising queries (see :class:`DETRHead`); their reference
            points are the noised box centres.
        mixed_selection (bool): mixed query selection (DINO's; needs ``as_two_stage``): the
            chosen proposals give the reference boxes and the positional queries, the
            content queries are learned (``content_embed`` [Q, D]).
        look_forward_twice (bool): layer i's box is relative to layer i-1's prediction with
            its gradient (DINO's; see ``DeformableDetrTransformer.decode``).
    """

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=300,
                 num_feature_levels=4, transformer=DEFAULT, positional_encoding=DEFAULT,
                 criterion=DEFAULT, aux_loss=True, with_box_refine=False, as_two_stage=False,
                 num_dets=100, norm_groups=32, dn_cfg=None, mixed_selection=False,
                 look_forward_twice=False, init_cfg=None):
        BaseModule.__init__(self, init_cfg)  # DETRHead's own layers are not built
        transformer = resolve_default(transformer, dict())
        positional_encoding = resolve_default(positional_encoding, dict())
        criterion = resolve_default(criterion, dict(type='SetCriterion', use_focal=True))
        in_channels = list(in_channels) if isinstance(in_channels, (list, tuple)) \
            else [in_channels]
        self.num_classes, self.num_queries, self.aux_loss = num_classes, num_queries, aux_loss
        if as_two_stage and not with_box_refine:
            raise ValueError('DeformableDETRHead: as_two_stage=True needs with_box_refine=True')
        if mixed_selection and not as_two_stage:
            raise ValueError('DeformableDETRHead: mixed_selection=True needs as_two_stage=True')
        self.num_dets, self.with_box_refine = num_dets, with_box_refine
        self.as_two_stage, self.mixed_selection = as_two_stage, mixed_selection
        self.look_forward_twice = look_forward_twice
        self.input_proj = nn.ModuleList()
        for c in in_channels[:num_feature_levels]:
            self.input_proj.append(nn.Sequential(nn.Conv2d(c, embed_dims, 1),
                                                 nn.GroupNorm(norm_groups, embed_dims)))
        c = in_channels[-1]
        for _ in range(num_feature_levels - len(in_channels)):
            self.input_proj.append(nn.Sequential(nn.Conv2d(c, embed_dims, 3, 2, 1),
                                                 nn.GroupNorm(norm_groups, embed_dims)))
            c = embed_dims
        self.transformer = DeformableDetrTransformer(
            embed_dims=embed_dims, num_levels=num_feature_levels, **transformer)
        pe = dict(dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5),
                  **positional_encoding)
        self.positional_encoding = SinePositionalEncoding2D(**pe)
        if as_two_stage:
            self.proposals = EncoderProposals(embed_dims, with_queries=self.proposal_queries)
            if mixed_selection:
                self.content_embed = nn.Embedding(num_queries, embed_dims)
        else:
            self.query_embed = nn.Embedding(num_queries, 2 * embed_dims)  # (query_pos, tgt)
            self.reference_points = nn.Linear(embed_dims, 2)
        class_embed = nn.Linear(embed_dims, num_classes)
        bbox_embed = MLP(embed_dims, embed_dims, 4, 3)
        num_layers = len(self.transformer.decoder) + int(as_two_stage)  # + encoder's
        if with_box_refine:
            self.class_embed = nn.ModuleList(copy.deepcopy(class_embed) for _ in range(num_layers))
            self.bbox_embed = nn.ModuleList(copy.deepcopy(bbox_embed) for _ in range(num_layers))
        else:
            self.class_embed, self.bbox_embed = class_embed, bbox_embed
        self.criterion = MODELS.build(dict(criterion, num_classes=num_classes))
        self.dn = DenoisingQueries(num_classes, embed_dims, **dn_cfg) if dn_cfg else None
        self._reset_parameters()

    def _reset_parameters(self):
        for proj in self.input_proj:
            nn.init.xavier_uniform_(proj[0].weight, gain=1)
            nn.init.zeros_(proj[0].bias)
        if not self.as_two_stage:
            nn.init.xavier_uniform_(self.reference_points.weight, gain=1)
            nn.init.zeros_(self.reference_points.bias)
        bias = -math.log((1 - 0.01) / 0.01)  # prior probability 0.01 for every class
        for cls in self._per_layer(self.class_embed):
            nn.init.constant_(cls.bias, bias)
        for i, box in enumerate(self._per_layer(self.bbox_embed)):
            nn.init.zeros_(box.layers[-1].weight)
            nn.init.zeros_(box.layers[-1].bias)
            if i == 0 and not self.as_two_stage:  # initial boxes small; later layers refine
                nn.init.constant_(box.layers[-1].bias[2:], -2.0)

    @staticmethod
    def _per_layer(m):
        return list(m) if isinstance(m, nn.ModuleList) else [m]

    def _layer(self, m, i):
        return m[i] if isinstance(m, nn.ModuleList) else m

    def matching_queries(self, memory, mask, shapes):
        """memory [B, S, D], mask [B, S], shapes [L, 2] -> (tgt, query_pos [B, Q, D],
        reference [B, Q, 2] or, two-stage, [B, Q, 4], encoder outputs or None).

        Learned: both halves of ``query_embed``, reference = sigmoid(Linear(query_pos)).
        Two-stage: see :meth:`two_stage_queries`; with ``mixed_selection`` the content
        queries are ``content_embed``'s."""
        if self.as_two_stage:
            tgt, query_pos, reference, enc = self.two_stage_queries(memory, mask, shapes)
            if self.mixed_selection:
                tgt = self.content_embed.weight.unsqueeze(0).expand(memory.shape[0], -1, -1)
            return tgt, query_pos, reference, enc
        query_pos, tgt = self.query_embed.weight.chunk(2, dim=-1)
        query_pos = query_pos.unsqueeze(0).expand(memory.shape[0], -1, -1)
        tgt = tgt.unsqueeze(0).expand(memory.shape[0], -1, -1)
        return tgt, query_pos, run_in_fp32(self.reference_points, query_pos).sigmoid(), None

    # Deformable DETR's references rank every pixel, padding included (its proposals are
    # invalid, +inf): kept so that equal weights give equal outputs
    rank_valid_only = False
    # two-stage: the queries are the chosen boxes' sine embeddings, projected (Deformable
    # DETR); the proposals rank by the first class logit and are scored class-agnostically
    # on every pixel (DINO's head changes all three)
    proposal_queries = True
    enc_class_agnostic = True

    def proposal_score(self, logits):
        """[B, S, K] pixel logits -> [B, S]: the score that ranks the proposals."""
        return logits[..., 0]

    def proposal_outputs(self, logits, box_logits, top):
        """The encoder outputs the losses score (``enc_outputs``): every pixel's."""
        return dict(pred_logits=logits, pred_boxes=box_logits.sigmoid())

    def decode_kwargs(self):
        """Extra arguments of :meth:`DeformableDetrTransformer.decode` (DINO's options)."""
        return dict(look_forward_twice=True) if self.look_forward_twice else {}

    def two_stage_queries(self, memory, mask, shapes, num=None):
        """Score every encoder pixel's box; the top ``num`` (default ``num_queries``) by the
        first class logit give the reference boxes (detached) and the queries ->
        (tgt, query_pos [B, Q, D], reference [B, Q, 4],
        dict(pred_logits [B, S, K], pred_boxes [B, S, 4]))."""
        pixels, proposals = self.proposals(memory, mask, shapes)
        logits = run_in_fp32(self.class_embed[-1], pixels)
        box_logits = run_in_fp32(self.bbox_embed[-1], pixels) + proposals
        score, wanted = self.proposal_score(logits), num or self.num_queries
        if wanted > score.shape[1]:
            raise ValueError(f'{type(self).__name__}: two-stage picks {wanted} queries among '
                             f'the pixels of the feature map, which has only {score.shape[1]} '
                             f'(shapes {[tuple(map(int, s)) for s in shapes]}): give it larger '
                             f'images or a finer map, or fewer queries')
        if self.rank_valid_only:  # padded / border pixels never become queries
            score = score.masked_fill(torch.isinf(proposals).any(-1), float('-inf'))
        top = score.topk(wanted, dim=1)[1]
        chosen = box_logits.gather(1, top[..., None].expand(-1, -1, 4)).detach()
        enc = self.proposal_outputs(logits, box_logits, top)
        if not self.proposal_queries:
            return None, None, chosen.sigmoid(), enc
        query_pos, tgt = self.proposals.queries(chosen)
        return tgt, query_pos, chosen.sigmoid(), enc

    def build_queries(self, tgt, query_pos, reference, data_samples=None):
        """Prepend the DN queries (training with ``dn_cfg``) to the matching ones ->
        (tgt, query_pos [B, Q', D], reference [B, Q', 2 or 4], self_attn_mask or None,
        dn or None); a DN query's reference is its noised box (its centre for 2-d ones)."""
        dn = self.build_denoising(data_samples)
        if dn is None:
            return tgt, query_pos, reference, None, None
        dn_ref = self.dn_reference(dn['boxes'])[..., :reference.shape[-1]]
        query_pos = None if query_pos is None else torch.cat([dn['query_pos'], query_pos], 1)
        return (torch.cat([dn['tgt'], tgt], 1), query_pos,
                torch.cat([dn_ref, reference], 1), dn['attn_mask'], dn)

    @staticmethod
    def dn_reference(boxes):
        """The noised boxes [B, N_dn, 4] -> the DN queries' reference boxes."""
        return boxes

    def project_levels(self, feats, pixel_mask):
        """feats: tuple of [B, C_l, H_l, W_l]; pixel_mask [B, H, W] (True = padding) ->
        per level: src [B, D, h, w], mask [B, h, w], pos [B, D, h, w]."""
        srcs, masks, pos = [], [], []
        x = feats[-1]
        for lvl, proj in enumerate(self.input_proj):
            if lvl < len(feats):
                src = proj(feats[lvl])
            else:  # extra level: from the last input map, then from the previous extra
                src = x = proj(x)
            mask = F.interpolate(pixel_mask[None].float(), size=src.shape[-2:])[0].bool()
            srcs.append(src)
            masks.append(mask)
            pos.append(self.positional_encoding(mask).to(src.dtype))
        return srcs, masks, pos

    def forward(self, feats, pixel_mask, data_samples=None):
        """feats: tuple of L' maps [B, C_l, H_l, W_l]; pixel_mask [B, H, W] bool ->
        dict(pred_logits [N, B, Q, K], pred_boxes [N, B, Q, 4] normalised cxcywh) for the
        N decoder layers (+ ``dn``, see :meth:`DETRHead.forward`; two-stage also
        ``enc_outputs``: the encoder pixels' ``pred_logits`` [B, S, K] and
        ``pred_boxes`` [B, S, 4])."""
        return self.decode_queries(self.encode(feats, pixel_mask), data_samples)

    def encode(self, feats, pixel_mask):
        """The input projections and the encoder -> (memory [B, S, D], mask [B, S] (True =
        padding), level shapes [(h_l, w_l)] (S = Σ h_l·w_l), valid ratios [B, L, 2])."""
        srcs, masks, pos = self.project_levels(feats, pixel_mask)
        return self.transformer.encode(srcs, masks, pos)

    def decode_queries(self, encoded, data_samples=None):
        """:meth:`encode`'s output -> :meth:`forward`'s: the matching (and DN) queries
        through the decoder."""
        memory, mask, shapes, ratios = encoded
        tgt, query_pos, reference, enc = self.matching_queries(memory, mask, shapes)
        tgt, query_pos, reference, attn_mask, dn = self.build_queries(
            tgt, query_pos, reference, data_samples)
        # the decoder in float32 under bf16 autocast (its queries are few): see
        # densevit/utils/precision.py; with it bf16 AP stays within 0.001 of fp32's
        hs, refs = run_in_fp32(
            self.transformer.decode, tgt, query_pos, reference, memory, mask, shapes, ratios,
            bbox_embed=self.bbox_embed if self.with_box_refine else None,
            self_attn_mask=attn_mask, **self.decode_kwargs())
        out = self.split_denoising(self.layer_predictions(hs, refs), dn)
        if enc is not None:
            out['enc_outputs'] = enc
        return out

    def layer_predictions(self, hs, refs):
        """Decoder outputs hs [N, B, T, D] and each layer's reference (list of [B, T, 2 or 4])
        -> dict(pred_logits [N, B, T, K], pred_boxes [N, B, T, 4]): layer i's class logits and
        its box, a delta relative to its reference (through ``inverse_sigmoid`` at the
        refinement's eps)."""
        eps = self.decode_kwargs().get('refine_eps', 1e-5)
        logits, boxes = [], []
        for i, (h, ref) in enumerate(zip(hs, refs, strict=True)):
            logits.append(run_in_fp32(self._layer(self.class_embed, i), h))
            delta = run_in_fp32(self._layer(self.bbox_embed, i), h)
            ref = inverse_sigmoid(ref, eps=eps)
            if ref.shape[-1] == 4:
                delta = delta + ref
            else:
                delta = torch.cat([delta[..., :2] + ref, delta[..., 2:]], -1)
            boxes.append(delta.sigmoid())
        return dict(pred_logits=torch.stack(logits), pred_boxes=torch.stack(boxes))

    def layer_losses(self, out, targets, num_boxes, prefix=''):
        """DETRHead's per-layer losses, plus (two-stage) the encoder boxes' ``enc_loss_*``:
        matched to the ground truth with every label set to class 0 (class-agnostic, the
        logit that ranks the proposals)."""
        losses = super().layer_losses(out, targets, num_boxes, prefix)
        enc = out.get('enc_outputs')
        if enc is not None:
            if self.enc_class_agnostic:
                targets = [dict(t, labels=torch.zeros_like(t['labels'])) for t in targets]
            losses.update({prefix + 'enc_' + k: v for k, v in
                           self.loss_by_layer(enc, targets, num_boxes).items()})
        return losses

    def postprocess(self, logits, boxes, meta, rescale=True):
        """logits [Q, K], boxes [Q, 4] -> InstanceData of the top ``num_dets`` (query, class)
        pairs by sigmoid score (a query may appear with several classes), in float32 at least;
        ``queries`` [N]: each detection's decoder query."""
        logits, boxes = at_least_fp32(logits), at_least_fp32(boxes)
        Q, K = logits.shape
        scores, idx = logits.sigmoid().flatten().topk(min(self.num_dets, Q * K))
        labels, query = idx % K, idx // K
        return InstanceData(bboxes=boxes_to_pixels(boxes[query], meta, rescale), scores=scores,
                            labels=labels, queries=query)
