"""DINO's head (Zhang et al. 2023, "DINO: DETR with Improved DeNoising Anchor Boxes").

Two-stage Deformable DETR with box refinement (:class:`DeformableDETRHead`, which holds
the encoder, proposals, refinement loop, losses and post-processing), changed in four
places, each a hook of that head:

- mixed query selection: the top-K encoder proposals (ranked by their best class logit)
  give only the reference boxes; the content queries are learned (``content_embed``);
- every decoder layer's positional query is an MLP of its reference box's sine embedding
  (``query_pos_head``), and every layer's output is read through one LayerNorm
  (``decoder_norm``);
- look forward twice: layer i's box is relative to layer i-1's prediction with its
  gradient;
- contrastive denoising (``denoising.py`` with ``contrastive=True, noise='corners'``):
  positive and negative noised copies of each box per group, the negatives' target
  "no object"; the encoder's losses score the chosen K proposals with the real classes.
"""
from torch import nn

from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.models.layers.mlp import MLP
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .deformable_detr_head import DeformableDETRHead
from .denoising import box_sine_embedding

DINO_CRITERION = dict(type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
                      matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0,
                                   cost_bbox=5.0, cost_giou=2.0),
                      loss_weights=dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0))
# what makes DenoisingQueries DINO's contrastive denoising (MMDetection's CdnQueryGenerator)
DINO_DENOISING = dict(contrastive=True, noise='corners', group_rule='boxes', box_pos=False)


@MODELS.register_module()
class DINOHead(DeformableDETRHead):
    """DINO head on L feature levels (always two-stage with box refinement).

    Args:
        num_classes (int): K. in_channels (list[int]): the maps' channels.
        embed_dims (int): D (256). num_queries (int): K matching queries (900).
        num_feature_levels (int): L (4).
        transformer (dict): kwargs of ``DeformableDetrTransformer`` (default
            ``dict(feedforward_channels=2048, dropout=0.0)``, DINO's).
        positional_encoding (dict): default ``dict(temperature=20, offset=0.0)`` (DINO's).
        criterion (dict): default :data:`DINO_CRITERION` (focal; loss weights class 1,
            L1 5, GIoU 2; matching costs 2, 5, 2).
        dn_cfg (dict | None): ``DenoisingQueries`` kwargs over :data:`DINO_DENOISING`
            (default ``label_noise_scale=0.5, box_noise_scale=1.0, num_dn_queries=100``);
            None: no denoising.
        num_dets, norm_groups, aux_loss: as :class:`DeformableDETRHead` (``num_dets`` 300).
    """

    proposal_queries = False  # no projection of the proposals into queries
    enc_class_agnostic = False  # the K chosen proposals are scored with the real classes

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=900,
                 num_feature_levels=4, transformer=DEFAULT, positional_encoding=DEFAULT,
                 criterion=DEFAULT, aux_loss=True, num_dets=300, norm_groups=32,
                 dn_cfg=DEFAULT, init_cfg=None):
        transformer = resolve_default(transformer, dict(feedforward_channels=2048, dropout=0.0))
        positional_encoding = resolve_default(positional_encoding,
                                              dict(temperature=20, offset=0.0))
        criterion = resolve_default(criterion, DINO_CRITERION)
        dn_cfg = resolve_default(dn_cfg, dict(label_noise_scale=0.5, box_noise_scale=1.0,
                                              num_dn_queries=100))
        super().__init__(num_classes, in_channels, embed_dims, num_queries, num_feature_levels,
                         transformer, positional_encoding, criterion, aux_loss,
                         with_box_refine=True, as_two_stage=True, num_dets=num_dets,
                         norm_groups=norm_groups,
                         dn_cfg=None if dn_cfg is None else {**DINO_DENOISING, **dn_cfg},
                         mixed_selection=True, look_forward_twice=True, init_cfg=init_cfg)
        self.query_pos_head = MLP(2 * embed_dims, embed_dims, embed_dims, 2)
        self.decoder_norm = nn.LayerNorm(embed_dims)
        nn.init.xavier_uniform_(self.content_embed.weight)

    def proposal_score(self, logits):
        """A pixel's proposal ranks by its best class logit (DINO; Deformable: class 0)."""
        return logits.max(-1)[0]

    def proposal_outputs(self, logits, box_logits, top):
        """Only the chosen proposals are scored (their boxes keep their gradient)."""
        def pick(x):
            return x.gather(1, top[..., None].expand(-1, -1, x.shape[-1]))
        return dict(pred_logits=pick(logits), pred_boxes=pick(box_logits).sigmoid())

    @staticmethod
    def dn_reference(boxes):
        """The noised boxes through ``inverse_sigmoid`` at eps 1e-3 and back (DINO's code
        keeps the DN boxes as logits): sides of 0 become ~1e-3."""
        return inverse_sigmoid(boxes, eps=1e-3).sigmoid()

    def box_query_pos(self, boxes):
        """Reference boxes [B, T, 4] (cxcywh of the padded map) -> positional queries
        [B, T, D]: MLP of the sine embedding of (cy, cx, w, h), D / 2 features each."""
        sine = box_sine_embedding(boxes[..., [1, 0, 2, 3]],
                                  self.content_embed.embedding_dim // 2)
        return self.query_pos_head(sine.to(boxes.dtype))

    def decode_kwargs(self):
        return dict(query_pos_fn=self.box_query_pos, look_forward_twice=True,
                    refine_eps=1e-3, out_norm=self.decoder_norm)
