"""Co-Deformable-DETR's head (Zong et al. 2023, "DETRs with Collaborative Hybrid
Assignments Training"): Deformable DETR with collaborative auxiliary heads, during
training only.

Co-DETR's Deformable DETR is the two-stage variant with iterative box refinement, mixed
query selection (learned content queries, the chosen proposals' positions) and look
forward twice (:class:`DeformableDETRHead` with those options, 300 queries, the focal
loss), plus Co-DETR's auxiliary heads on the encoder's levels and an extra stride-2 level
and their customized positive queries
(:class:`~densevit.models.heads.collaborative_training.CollaborativeTraining`). What is
Co-Deformable-DETR's own, against Co-DINO
(:class:`~densevit.models.heads.co_dino_head.CoDINOHead`):

- a positive query's position and content both come from its anchor, as two-stage
  Deformable DETR makes its queries from the chosen proposals: the anchor's sine
  embedding through a Linear [2D -> 2D] + LayerNorm (per auxiliary head:
  ``aux_pos_trans`` / ``aux_pos_trans_norm``), split into the positional and the content
  query;
- the content query adds the auxiliary map's feature at the anchor through a Linear +
  LayerNorm (``aux_feat_trans`` / ``aux_feat_trans_norm``: Co-DETR's ``with_coord_feat``);
  the positional query adds a learned vector per auxiliary head (``aux_head_embed``
  [H, D]);
- the classification loss, of the DETR queries and of the positive queries, is the
  sigmoid focal loss (Co-DINO: the quality focal loss); no denoising.

Inference is Deformable DETR's: ``forward`` and ``predict`` never touch the auxiliary
parts.
"""
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .collaborative_training import CollaborativeTraining, anchor_features
from .deformable_detr_head import DeformableDETRHead

# Co-Deformable-DETR's: focal loss weight 2, L1 5, GIoU 2; matching costs 2, 5, 2
CO_DEFORMABLE_DETR_CRITERION = dict(
    type='SetCriterion', use_focal=True, focal_alpha=0.25, focal_gamma=2.0,
    matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0, cost_bbox=5.0,
                 cost_giou=2.0),
    loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0))


@MODELS.register_module()
class CoDeformableDETRHead(CollaborativeTraining, DeformableDETRHead):
    """Deformable DETR head with Co-DETR's auxiliary heads and customized positive queries.

    Args:
        num_classes (int): K. in_channels (list[int]): the maps' channels.
        aux_heads (list[dict]), max_pos_queries (int), min_pos_queries (int),
            aux_norm_groups (int): see :meth:`CollaborativeTraining.init_collaborative`
            (default one ``CoATSSHead``, 300, 9, 32).
        transformer (dict): default ``dict(feedforward_channels=2048, dropout=0.0)``
            (Co-DETR's).
        criterion (dict): default :data:`CO_DEFORMABLE_DETR_CRITERION`.
        with_box_refine, as_two_stage, mixed_selection, look_forward_twice (bool): as
            :class:`DeformableDETRHead`, all True by default (Co-DETR's).
        **kwargs: :class:`DeformableDETRHead`'s (``embed_dims``, ``num_queries``,
            ``num_feature_levels``, ``norm_groups``, ``num_dets`` ...).
    """

    def __init__(self, num_classes, in_channels, aux_heads=DEFAULT, max_pos_queries=300,
                 min_pos_queries=9, aux_norm_groups=32, transformer=DEFAULT, criterion=DEFAULT,
                 with_box_refine=True, as_two_stage=True, mixed_selection=True,
                 look_forward_twice=True, **kwargs):
        super().__init__(
            num_classes, in_channels,
            transformer=resolve_default(transformer, dict(feedforward_channels=2048,
                                                          dropout=0.0)),
            criterion=resolve_default(criterion, CO_DEFORMABLE_DETR_CRITERION),
            with_box_refine=with_box_refine, as_two_stage=as_two_stage,
            mixed_selection=mixed_selection, look_forward_twice=look_forward_twice, **kwargs)
        self.init_collaborative(resolve_default(aux_heads, [dict(type='CoATSSHead')]),
                                max_pos_queries, min_pos_queries, aux_norm_groups)
        D, H = self.embed_dims, len(self.aux_heads)
        self.aux_pos_trans = nn.ModuleList(nn.Linear(2 * D, 2 * D) for _ in range(H))
        self.aux_pos_trans_norm = nn.ModuleList(nn.LayerNorm(2 * D) for _ in range(H))
        self.aux_feat_trans = nn.ModuleList(nn.Linear(D, D) for _ in range(H))
        self.aux_feat_trans_norm = nn.ModuleList(nn.LayerNorm(D) for _ in range(H))
        self.aux_head_embed = nn.Embedding(H, D)
        for w in [lin.weight for lin in [*self.aux_pos_trans, *self.aux_feat_trans]] + \
                [self.aux_head_embed.weight]:
            nn.init.xavier_uniform_(w)

    def positive_query_embeddings(self, head_idx, reference, maps, chosen):
        """Auxiliary head ``head_idx``'s positive queries -> (content [B, T, D], positional
        [B, T, D]): LayerNorm(Linear(sine(anchor))) [B, T, 2D] split into position and
        content; the content plus LayerNorm(Linear(the anchor's map feature)), the position
        plus the head's ``aux_head_embed``."""
        pos = self.aux_pos_trans_norm[head_idx](self.aux_pos_trans[head_idx](
            self.reference_sine(reference, maps[0].dtype)))
        query_pos, tgt = pos.split(self.embed_dims, -1)
        feat = anchor_features(maps, chosen)
        tgt = tgt + self.aux_feat_trans_norm[head_idx](self.aux_feat_trans[head_idx](feat))
        return tgt, query_pos + self.aux_head_embed.weight[head_idx]
