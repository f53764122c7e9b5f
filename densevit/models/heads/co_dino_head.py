"""Co-DINO's head (Zong et al. 2023, "DETRs with Collaborative Hybrid Assignments
Training"): DINO with collaborative auxiliary heads, during training only.

:class:`DINOHead` (encoder, mixed query selection, contrastive denoising, look forward
twice) plus, in :meth:`CoDINOHead.loss`:

- the encoder memory cut back into its L level maps, plus one more level: a 3×3 stride-2
  convolution + GroupNorm of the coarsest (``aux_downsample``);
- one-to-many auxiliary heads (:class:`~densevit.models.heads.co_atss_head.CoATSSHead`)
  on those L + 1 maps, their losses added with the head's index appended
  (``loss_cls0``, ``loss_bbox0``, ``loss_centerness0``);
- per auxiliary head, its positive anchors as customized positive queries
  (:func:`~densevit.models.heads.positive_queries.positive_queries`): reference box the
  anchor, content query a Linear + LayerNorm of the anchor's sine embedding (per head:
  ``aux_pos_trans`` / ``aux_pos_trans_norm``), one more pass of DINO's decoder over the
  memory (no denoising, no matching queries), every layer trained on that head's
  assignment with DINO's criterion (``loss_cls_aux0``, ``d0.loss_cls_aux0`` ...).

Co-DINO's classification loss, of the DETR queries and of the positive queries, is the
quality focal loss (:data:`CO_DINO_CRITERION`). Inference is DINO's: ``forward`` and
``predict`` never touch the auxiliary parts.
"""
from torch import nn

from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.models.losses.set_criterion import num_boxes_across_ranks
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import run_in_fp32
from densevit.utils.random_draws import UniformDraws

from .co_atss_head import memory_to_maps
from .denoising import box_sine_embedding
from .dino_head import DINO_CRITERION, DINOHead
from .positive_queries import positive_queries

CO_DINO_CRITERION = dict(DINO_CRITERION, quality_focal=True)


@MODELS.register_module()
class CoDINOHead(DINOHead):
    """DINO head with Co-DETR's auxiliary heads and customized positive queries.

    Args:
        num_classes (int): K. in_channels (list[int]): the maps' channels.
        aux_heads (list[dict]): auxiliary head configs (default one ``CoATSSHead``);
            ``num_classes`` and ``in_channels`` (D) are filled in. Each reads the
            ``num_feature_levels`` encoder levels plus the extra one, so needs that many + 1
            ``strides``.
        max_pos_queries (int): most positive queries per image and head (300).
        min_pos_queries (int): fewest queries per image and head, padded with random
            background anchors (9).
        aux_norm_groups (int): GroupNorm groups of the extra level's convolution (32).
        criterion (dict): default :data:`CO_DINO_CRITERION` (DINO's with the quality focal
            loss).
        **kwargs: :class:`DINOHead`'s (``embed_dims``, ``num_queries``,
            ``num_feature_levels``, ``transformer``, ``dn_cfg``, ``norm_groups`` ...).

    Attributes:
        draws: the random numbers of the positive queries' choice
            (:class:`~densevit.utils.random_draws.UniformDraws`); a test may give its own.
    """

    def __init__(self, num_classes, in_channels, aux_heads=DEFAULT, max_pos_queries=300,
                 min_pos_queries=9, aux_norm_groups=32, criterion=DEFAULT, **kwargs):
        super().__init__(num_classes, in_channels,
                         criterion=resolve_default(criterion, CO_DINO_CRITERION), **kwargs)
        aux_heads = resolve_default(aux_heads, [dict(type='CoATSSHead')])
        D, levels = self.content_embed.embedding_dim, len(self.input_proj)
        self.max_pos_queries, self.min_pos_queries = max_pos_queries, min_pos_queries
        self.aux_heads = nn.ModuleList()
        for i, cfg in enumerate(aux_heads):
            head = MODELS.build(dict(dict(num_classes=num_classes, in_channels=D), **cfg))
            if len(head.strides) != levels + 1:
                raise ValueError(
                    f'CoDINOHead: aux_heads[{i}] ({type(head).__name__}) has '
                    f'{len(head.strides)} strides {head.strides}, but reads the encoder\'s '
                    f'{levels} levels (num_feature_levels) plus the extra stride-2 level: '
                    f'{levels + 1} maps')
            self.aux_heads.append(head)
        self.aux_downsample = nn.Sequential(nn.Conv2d(D, D, 3, 2, 1),
                                            nn.GroupNorm(aux_norm_groups, D))
        self.aux_pos_trans = nn.ModuleList(nn.Linear(2 * D, D) for _ in self.aux_heads)
        self.aux_pos_trans_norm = nn.ModuleList(nn.LayerNorm(D) for _ in self.aux_heads)
        for lin in self.aux_pos_trans:
            nn.init.xavier_uniform_(lin.weight)
        self.draws = UniformDraws()

    def loss(self, feats, pixel_mask, data_samples):
        """DINO's losses plus each auxiliary head's (``*{i}``) and its positive queries'
        (``*_aux{i}``, ``d{j}.*_aux{i}``)."""
        encoded = self.encode(feats, pixel_mask)
        out = self.decode_queries(encoded, data_samples)
        targets = self.get_targets(data_samples)
        losses = self.layer_losses(
            out, targets, num_boxes_across_ranks(targets, out['pred_logits'].device))
        losses.update(self.aux_losses(encoded, data_samples))
        return losses

    def aux_maps(self, memory, shapes):
        """Memory [B, S, D] -> the L level maps [B, D, h_l, w_l] and the extra one."""
        maps = memory_to_maps(memory, shapes)
        return maps + [self.aux_downsample(maps[-1])]

    def aux_losses(self, encoded, data_samples):
        """Every auxiliary head's losses and its positive queries' (dict of scalars)."""
        maps = self.aux_maps(encoded[0], encoded[2])
        gt_boxes = [ds.gt_instances.bboxes.float() for ds in data_samples]
        gt_labels = [ds.gt_instances.labels.long() for ds in data_samples]
        sizes = [ds.metainfo['img_shape'][:2] for ds in data_samples]
        losses = {}
        for i, head in enumerate(self.aux_heads):
            head_losses, tg = head.loss(head(maps), gt_boxes, gt_labels, sizes)
            losses.update({f'{k}{i}': v for k, v in head_losses.items()})
            # an anchor off its image (on batch padding) is an all-zero box, as MMDetection's
            anchors = tg['anchors'] * tg['valid'][..., None]
            reference, targets, indices = positive_queries(
                anchors, tg['labels'], tg['boxes'], sizes, self.num_classes, self.draws,
                self.max_pos_queries, self.min_pos_queries)
            out = self.positive_query_outputs(i, reference, encoded)
            num_pos = num_boxes_across_ranks(targets, reference.device)  # positives, >= 1
            last = out['pred_logits'].shape[0] - 1
            for j in range(last + 1):
                layer = dict(pred_logits=out['pred_logits'][j], pred_boxes=out['pred_boxes'][j])
                tag = '' if j == last else f'd{j}.'
                losses.update({f'{tag}{k}_aux{i}': v for k, v in self.loss_by_layer(
                    layer, targets, num_pos, indices=indices).items()})
        return losses

    def positive_query_outputs(self, head_idx, reference, encoded):
        """reference [B, T, 4] (normalised cxcywh anchors) -> every decoder layer's
        ``pred_logits`` [N, B, T, K] and ``pred_boxes`` [N, B, T, 4] for these queries
        alone; content queries LayerNorm(Linear(sine(anchor))) of auxiliary head
        ``head_idx`` (the anchor clamped into (0, 1) as ``inverse_sigmoid`` does)."""
        memory, mask, shapes, ratios = encoded
        sine = box_sine_embedding(inverse_sigmoid(reference).sigmoid(),
                                  self.content_embed.embedding_dim // 2).to(memory.dtype)
        tgt = self.aux_pos_trans_norm[head_idx](self.aux_pos_trans[head_idx](sine))
        hs, refs = run_in_fp32(
            self.transformer.decode, tgt, None, reference.to(memory.dtype), memory, mask,
            shapes, ratios, bbox_embed=self.bbox_embed, **self.decode_kwargs())
        return self.layer_predictions(hs, refs)
