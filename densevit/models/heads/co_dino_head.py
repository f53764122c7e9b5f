"""Co-DINO's head (Zong et al. 2023, "DETRs with Collaborative Hybrid Assignments
Training"): DINO with collaborative auxiliary heads, during training only.

:class:`DINOHead` (encoder, mixed query selection, contrastive denoising, look forward
twice) plus Co-DETR's auxiliary heads on the encoder's levels and an extra stride-2 level
and their customized positive queries
(:class:`~densevit.models.heads.collaborative_training.CollaborativeTraining`). What is
Co-DINO's own:

- a positive query's content is a Linear + LayerNorm of its anchor's sine embedding (per
  auxiliary head: ``aux_pos_trans`` [2D -> D] / ``aux_pos_trans_norm``); its positional
  query is made by DINO's decoder from its reference box, as every DINO query's;
- the classification loss, of the DETR queries and of the positive queries, is the
  quality focal loss (:data:`CO_DINO_CRITERION`).

Inference is DINO's: ``forward`` and ``predict`` never touch the auxiliary parts.
"""
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .collaborative_training import CollaborativeTraining
from .dino_head import DINO_CRITERION, DINOHead

CO_DINO_CRITERION = dict(DINO_CRITERION, quality_focal=True)


@MODELS.register_module()
class CoDINOHead(CollaborativeTraining, DINOHead):
    """DINO head with Co-DETR's auxiliary heads and customized positive queries.

    Args:
        num_classes (int): K. in_channels (list[int]): the maps' channels.
        aux_heads (list[dict]), max_pos_queries (int), min_pos_queries (int),
            aux_norm_groups (int): see :meth:`CollaborativeTraining.init_collaborative`
            (default one ``CoATSSHead``, 300, 9, 32).
        criterion (dict): default :data:`CO_DINO_CRITERION` (DINO's with the quality focal
            loss).
        **kwargs: :class:`DINOHead`'s (``embed_dims``, ``num_queries``,
            ``num_feature_levels``, ``transformer``, ``dn_cfg``, ``norm_groups`` ...).
    """

    def __init__(self, num_classes, in_channels, aux_heads=DEFAULT, max_pos_queries=300,
                 min_pos_queries=9, aux_norm_groups=32, criterion=DEFAULT, **kwargs):
        super().__init__(num_classes, in_channels,
                         criterion=resolve_default(criterion, CO_DINO_CRITERION), **kwargs)
        self.init_collaborative(resolve_default(aux_heads, [dict(type='CoATSSHead')]),
                                max_pos_queries, min_pos_queries, aux_norm_groups)
        D = self.embed_dims
        self.aux_pos_trans = nn.ModuleList(nn.Linear(2 * D, D) for _ in self.aux_heads)
        self.aux_pos_trans_norm = nn.ModuleList(nn.LayerNorm(D) for _ in self.aux_heads)
        for lin in self.aux_pos_trans:
            nn.init.xavier_uniform_(lin.weight)

    def positive_query_embeddings(self, head_idx, reference, maps, chosen):
        """Content queries LayerNorm(Linear(sine(anchor))) [B, T, D] of auxiliary head
        ``head_idx``; no positional queries (DINO's decoder makes them)."""
        sine = self.reference_sine(reference, maps[0].dtype)
        return self.aux_pos_trans_norm[head_idx](self.aux_pos_trans[head_idx](sine)), None
