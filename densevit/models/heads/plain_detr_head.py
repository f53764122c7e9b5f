"""Plain-DETR's head (Lin et al. 2023, "DETR Doesn't Need Multi-Scale or Locality Design").

DETR on one single-scale map of a plain backbone, with no deformable attention: the
decoder's cross-attention is global (every query sees every pixel), biased by each
query's box (BoxRPB, ``layers/box_rpb.py``). What makes it converge is shared with
Deformable DETR and written once there: two-stage proposals from the map's pixels
(``encoder_proposals.py``), per-layer box refinement, denoising queries
(``denoising.py``), the sigmoid focal criterion and top-k post-processing; added here:
mixed query selection (DINO), look-forward-twice box gradients (DINO) and the
one-to-many branch (H-DETR's hybrid matching, ``one_to_many.py``). Every option can be
switched off in the config, which is how the ablation in docs/detr_family.md was run.
"""
import torch
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.box_rpb import BoxRelativePositionBias
from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid, valid_ratios
from densevit.models.layers.detr_transformer import DetrDecoderLayer, DetrEncoderLayer
from densevit.models.layers.mlp import MLP
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import run_in_fp32

from .deformable_detr_head import DeformableDETRHead
from .denoising import DenoisingQueries, box_sine_embedding
from .detr_head import DETRHead, mask_inputs
from .encoder_proposals import EncoderProposals
from .one_to_many import check_one_to_many, hybrid_attn_mask, repeat_targets


@MODELS.register_module()
class PlainDETRHead(DeformableDETRHead):
    """DETR head with global cross-attention on one map (used by the ``DETR`` detector).

    Args:
        num_classes (int): K (sigmoid classifier, no "no object" logit).
        in_channels (int): channels of the map.
        embed_dims (int): D (256). num_queries (int): Q one-to-one queries (300).
        num_heads (int): attention heads (8).
        num_encoder_layers (int): DETR encoder layers over the map (0: Plain-DETR, the
            backbone is the encoder).
        num_decoder_layers (int): 6. feedforward_channels (int): 2048. dropout (float): 0.0.
        box_rpb (dict | None): kwargs of :class:`BoxRelativePositionBias` (``hidden_dims``,
            ``stride``: input pixels per cell of the map, ``mode``), one per decoder
            layer; None: global cross-attention without a box bias.
        as_two_stage (bool): queries from the top-scoring pixel boxes of the map
            (``enc_loss_*`` trains them); else learned positions and reference boxes.
        proposal_size (float): two-stage: width = height of the pixel proposals (0.05,
            Deformable DETR's first level; one map has no coarser levels).
        mixed_selection (bool): two-stage only: the content query is learned, only the
            position comes from the proposal (DINO's mixed query selection).
        look_forward_twice (bool): layer i's box also trains layer i-1's box prediction
            (its reference, not detached); the next layer's reference stays detached.
        box_query_pos (bool): every layer's positional query is MLP(sine(its reference
            box)), as DAB-DETR / DINO, instead of the first layer's for all (Plain-DETR).
        one_to_many (dict | None): ``dict(num_queries=Q', k=6, loss_weight=1.0)``: Q'
            training-only queries matched to the ground truth repeated k times
            (``o2m_loss_*``); dropped at inference.
        positional_encoding, criterion, num_dets, norm_groups, dn_cfg, aux_loss: as
            :class:`DeformableDETRHead`.
    """

    rank_valid_only = True  # two-stage: a padded pixel's proposal never becomes a query

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=300, num_heads=8,
                 num_encoder_layers=0, num_decoder_layers=6, feedforward_channels=2048,
                 dropout=0.0, box_rpb=DEFAULT, as_two_stage=True, proposal_size=0.05,
                 mixed_selection=True, look_forward_twice=True, box_query_pos=False,
                 one_to_many=None, positional_encoding=DEFAULT, criterion=DEFAULT, aux_loss=True, num_dets=100, norm_groups=32, dn_cfg=None,
                 init_cfg=None):
        BaseModule.__init__(self, init_cfg)  # neither DETRHead's nor Deformable's layers
        box_rpb = resolve_default(box_rpb, dict())
        positional_encoding = resolve_default(positional_encoding, dict())
        criterion = resolve_default(criterion, dict(type='SetCriterion', use_focal=True))
        if isinstance(in_channels, (list, tuple)):
            if len(in_channels) != 1:
                raise ValueError(f'PlainDETRHead reads one feature map, got in_channels='
                                 f'{list(in_channels)}')
            in_channels = in_channels[0]
        if mixed_selection and not as_two_stage:
            raise ValueError('PlainDETRHead: mixed_selection=True needs as_two_stage=True')
        self.num_classes, self.num_queries, self.aux_loss = num_classes, num_queries, aux_loss
        self.num_dets, self.with_box_refine, self.as_two_stage = num_dets, True, as_two_stage
        self.mixed_selection, self.look_forward_twice = mixed_selection, look_forward_twice
        self.num_one_to_many, self.one_to_many_k, self.one_to_many_weight = 0, 0, 0.0
        if one_to_many is not None:
            opts = dict(one_to_many)
            self.num_one_to_many = opts.pop('num_queries', None)
            self.one_to_many_k = opts.pop('k', 6)
            self.one_to_many_weight = opts.pop('loss_weight', 1.0)
            if opts:
                raise ValueError(f'PlainDETRHead.one_to_many: unknown keys {sorted(opts)} '
                                 f'(known: num_queries, k, loss_weight)')
            check_one_to_many(self.num_one_to_many, self.one_to_many_k)
        self.input_proj = nn.ModuleList([nn.Sequential(
            nn.Conv2d(in_channels, embed_dims, 1), nn.GroupNorm(norm_groups, embed_dims))])
        self.encoder = nn.ModuleList(
            DetrEncoderLayer(embed_dims, num_heads, feedforward_channels, dropout)
            for _ in range(num_encoder_layers))
        self.decoder = nn.ModuleList(
            DetrDecoderLayer(embed_dims, num_heads, feedforward_channels, dropout)
            for _ in range(num_decoder_layers))
        self.box_rpb = None if box_rpb is None else nn.ModuleList(
            BoxRelativePositionBias(num_heads, **box_rpb) for _ in range(num_decoder_layers))
        self.embed_dims = embed_dims
        self.query_pos_head = MLP(2 * embed_dims, embed_dims, embed_dims, 2) \
            if box_query_pos else None
        pe = dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5, **positional_encoding)
        self.positional_encoding = SinePositionalEncoding2D(**pe)
        total = num_queries + self.num_one_to_many
        if as_two_stage:
            self.proposals = EncoderProposals(embed_dims, proposal_size)
            if mixed_selection:
                self.content_embed = nn.Embedding(total, embed_dims)
        else:
            self.query_embed = nn.Embedding(total, 2 * embed_dims)  # (query_pos, tgt)
            self.reference_points = nn.Linear(embed_dims, 4)  # a reference box per query
        num_layers = num_decoder_layers + int(as_two_stage)  # + the proposals' predictors
        self.class_embed = nn.ModuleList(nn.Linear(embed_dims, num_classes)
                                         for _ in range(num_layers))
        self.bbox_embed = nn.ModuleList(MLP(embed_dims, embed_dims, 4, 3)
                                        for _ in range(num_layers))
        self.criterion = MODELS.build(dict(criterion, num_classes=num_classes))
        self.dn = DenoisingQueries(num_classes, embed_dims, **dn_cfg) if dn_cfg else None
        for p in [*self.encoder.parameters(), *self.decoder.parameters()]:
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self._reset_parameters()

    def matching_queries(self, memory, mask, shape):
        """memory [B, S, D], mask [B, S], shape (H, W) -> (tgt, query_pos [B, n, D],
        reference boxes [B, n, 4], proposal outputs or None); n = Q, plus Q' one-to-many
        queries in training."""
        B = memory.shape[0]
        n = self.num_queries + (self.num_one_to_many if self.training else 0)
        if self.as_two_stage:
            tgt, query_pos, reference, enc = self.two_stage_queries(memory, mask, [shape], num=n)
            if self.mixed_selection:
                tgt = self.content_embed.weight[:n].unsqueeze(0).expand(B, -1, -1)
            return tgt, query_pos, reference, enc
        query_pos, tgt = self.query_embed.weight[:n].chunk(2, dim=-1)
        query_pos = query_pos.unsqueeze(0).expand(B, -1, -1)
        reference = run_in_fp32(self.reference_points, query_pos).sigmoid()
        return tgt.unsqueeze(0).expand(B, -1, -1), query_pos, reference, None

    def attn_mask(self, dn_mask, num_queries, device):
        """The decoder's self-attention mask for ``[DN | Q | Q']`` (True = blocked), or None."""
        if not (self.training and self.num_one_to_many):
            return dn_mask
        base = dn_mask if dn_mask is not None else torch.zeros(
            num_queries, num_queries, dtype=torch.bool, device=device)
        return hybrid_attn_mask(base, self.num_one_to_many, device)

    def cross_attn_bias(self, layer, boxes, key_mask, size):
        """[B·heads, T, H·W] float: the layer's BoxRPB of ``boxes`` [B, T, 4] (cxcywh of the
        padded map), -inf on padded pixels; None without BoxRPB."""
        if self.box_rpb is None:
            return None
        bias = self.box_rpb[layer](boxes, size)
        bias = bias.masked_fill(key_mask[:, None, None, :], float('-inf'))
        return bias.flatten(0, 1)

    def decode(self, tgt, query_pos, reference, memory, pos, key_mask, size, ratios, attn_mask):
        """Decoder with box refinement -> (hs [L, B, T, D], boxes [L, B, T, 4] in [0, 1])."""
        hs, boxes = [], []
        prev = reference  # what layer i's box is relative to (look forward twice: with grad)
        scale = torch.cat([ratios, ratios], -1)  # [B, 1, 4]: image -> padded map
        out = tgt
        for i, layer in enumerate(self.decoder):
            if self.query_pos_head is not None:
                sine = box_sine_embedding(reference, self.embed_dims // 2)  # [B, T, 2D]
                query_pos = self.query_pos_head(sine.to(tgt.dtype))
            bias = self.cross_attn_bias(i, reference * scale, key_mask, size)
            out = layer(out, memory, pos=pos, query_pos=query_pos,
                        memory_key_padding_mask=key_mask if bias is None else None,
                        self_attn_mask=attn_mask, cross_attn_bias=bias)
            delta = run_in_fp32(self.bbox_embed[i], out)
            boxes.append((delta + inverse_sigmoid(prev)).sigmoid())
            new = (delta + inverse_sigmoid(reference)).sigmoid()
            reference = new.detach()
            prev = new if self.look_forward_twice else reference
            hs.append(out)
        return torch.stack(hs), torch.stack(boxes)

    def forward(self, feat, mask, data_samples=None, with_mask_inputs=False):
        """feat [B, C, h, w] (or a 1-tuple of it), mask [B, h', w'] bool (True = padding;
        resized to the map) -> dict(pred_logits [L, B, Q, K], pred_boxes [L, B, Q, 4]
        normalised cxcywh) for the L decoder layers; in training also ``dn`` (see
        :meth:`DETRHead.forward`) and ``one_to_many`` (the Q' queries' outputs), and with
        ``as_two_stage`` ``enc_outputs`` (every pixel's ``pred_logits`` / ``pred_boxes``);
        with ``with_mask_inputs`` ``mask_inputs`` of the Q one-to-one queries
        (:func:`~densevit.models.heads.detr_head.mask_inputs`)."""
        feats = tuple(feat) if isinstance(feat, (tuple, list)) else (feat,)
        srcs, masks, pos = self.project_levels(feats, mask)
        src, key_mask = srcs[0], masks[0].flatten(1)
        size = tuple(src.shape[-2:])
        memory = src.flatten(2).transpose(1, 2)
        pos = pos[0].flatten(2).transpose(1, 2)
        for layer in self.encoder:
            memory = layer(memory, pos=pos, key_padding_mask=key_mask)
        tgt, query_pos, reference, enc = self.matching_queries(memory, key_mask, size)
        tgt, query_pos, reference, dn_mask, dn = self.build_queries(
            tgt, query_pos, reference, data_samples)
        attn_mask = self.attn_mask(dn_mask, self.num_queries, memory.device)
        hs, boxes = self.decode(tgt, query_pos, reference, memory, pos, key_mask, size,
                                valid_ratios(masks), attn_mask)
        logits = torch.stack([run_in_fp32(self.class_embed[i], h) for i, h in enumerate(hs)])
        out = self.split_denoising(dict(pred_logits=logits, pred_boxes=boxes), dn)
        if self.training and self.num_one_to_many:
            Q = self.num_queries
            out['one_to_many'] = {k: out[k][:, :, Q:] for k in ('pred_logits', 'pred_boxes')}
            out['pred_logits'], out['pred_boxes'] = (out['pred_logits'][:, :, :Q],
                                                     out['pred_boxes'][:, :, :Q])
        if enc is not None:
            out['enc_outputs'] = enc
        if with_mask_inputs:
            first = dn['num_dn'] if dn is not None else 0
            out['mask_inputs'] = mask_inputs(hs[-1][:, first:first + self.num_queries],
                                             memory, src, masks[0])
        return out

    def layer_losses(self, out, targets, num_boxes, prefix=''):
        """Deformable DETR's losses (one-to-one queries, DN, proposals), plus the one-to-many
        queries' against the ground truth repeated k times (``o2m_loss_*``, times
        ``loss_weight``)."""
        losses = super().layer_losses(out, targets, num_boxes, prefix)
        many = out.get('one_to_many')
        if many is not None:
            k = self.one_to_many_k
            extra = DETRHead.layer_losses(self, many, repeat_targets(targets, k),
                                          num_boxes * k, prefix + 'o2m_')
            losses.update({key: v * self.one_to_many_weight for key, v in extra.items()})
        return losses
