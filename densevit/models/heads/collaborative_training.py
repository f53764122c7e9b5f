"""Co-DETR's collaborative hybrid assignments training (Zong et al. 2023, "DETRs with
Collaborative Hybrid Assignments Training"), shared by its query heads
(:class:`~densevit.models.heads.co_dino_head.CoDINOHead`,
:class:`~densevit.models.heads.co_deformable_detr_head.CoDeformableDETRHead`).

During training only, on top of a Deformable-DETR-family head's own losses:

- the encoder memory cut back into its L level maps, plus one more level: a 3×3 stride-2
  convolution + GroupNorm of the coarsest (``aux_downsample``);
- one-to-many auxiliary heads (§3.2; :class:`~densevit.models.heads.co_atss_head.CoATSSHead`)
  on those L + 1 maps, their losses added with the head's index appended
  (``loss_cls0``, ``loss_bbox0``, ``loss_centerness0``);
- per auxiliary head, its positive anchors as customized positive queries (§3.3;
  :func:`~densevit.models.heads.positive_queries.positive_queries`): reference box the
  anchor, the queries made by the head class (``positive_query_embeddings``),
  one more pass of the head's decoder over the memory (no denoising, no matching queries),
  every layer trained on that auxiliary head's assignment with the head's own criterion
  (``loss_cls_aux0``, ``d0.loss_cls_aux0`` ...).

Inference never touches these parts.
"""
import torch
from torch import nn

from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.models.losses.set_criterion import num_boxes_across_ranks
from densevit.registry import MODELS
from densevit.utils.precision import run_in_fp32
from densevit.utils.random_draws import UniformDraws

from .co_atss_head import memory_to_maps
from .denoising import box_sine_embedding
from .positive_queries import positive_queries


def anchor_features(maps, chosen):
    """L' maps [B, D, h_l, w_l] and anchor indices [B, T] (one anchor per location, levels in
    order, rows then columns: the auxiliary head's anchor order) -> [B, T, D]: each
    anchor's feature."""
    flat = torch.cat([m.flatten(2) for m in maps], 2).transpose(1, 2)  # [B, A, D]
    return flat.gather(1, chosen[..., None].expand(-1, -1, flat.shape[-1]))


class CollaborativeTraining:
    """Mixin of a :class:`~densevit.models.heads.deformable_detr_head.DeformableDETRHead`
    subclass (listed before it): the auxiliary heads and their positive queries' losses in
    :meth:`loss`. The subclass calls :meth:`init_collaborative` after its own ``__init__``
    and defines how the positive queries are made: ``positive_query_embeddings(head_idx,
    reference, maps, chosen)``, auxiliary head ``head_idx``'s anchors ``reference``
    [B, T, 4] (normalised cxcywh), the L + 1 maps [B, D, h_l, w_l] and ``chosen`` [B, T]
    (each query's anchor, see :func:`anchor_features`) -> (content queries [B, T, D],
    positional queries [B, T, D] or None where the decoder makes them).

    Attributes:
        draws: the random numbers of the positive queries' choice
            (:class:`~densevit.utils.random_draws.UniformDraws`); a test may give its own.
    """

    def init_collaborative(self, aux_heads, max_pos_queries=300, min_pos_queries=9,
                           aux_norm_groups=32):
        """Build the auxiliary heads and the extra level.

        Args:
            aux_heads (list[dict]): auxiliary head configs; ``num_classes`` and
                ``in_channels`` (D) are filled in. Each reads the ``num_feature_levels``
                encoder levels plus the extra one, so needs that many + 1 ``strides``.
            max_pos_queries (int): most positive queries per image and head (300).
            min_pos_queries (int): fewest queries per image and head, padded with random
                background anchors (9).
            aux_norm_groups (int): GroupNorm groups of the extra level's convolution (32).
        """
        D, levels = self.embed_dims, len(self.input_proj)
        self.max_pos_queries, self.min_pos_queries = max_pos_queries, min_pos_queries
        self.aux_heads = nn.ModuleList()
        for i, cfg in enumerate(aux_heads):
            head = MODELS.build(dict(dict(num_classes=self.num_classes, in_channels=D), **cfg))
            if len(head.strides) != levels + 1:
                raise ValueError(
                    f'{type(self).__name__}: aux_heads[{i}] ({type(head).__name__}) has '
                    f'{len(head.strides)} strides {head.strides}, but reads the encoder\'s '
                    f'{levels} levels (num_feature_levels) plus the extra stride-2 level: '
                    f'{levels + 1} maps')
            self.aux_heads.append(head)
        self.aux_downsample = nn.Sequential(nn.Conv2d(D, D, 3, 2, 1),
                                            nn.GroupNorm(aux_norm_groups, D))
        self.draws = UniformDraws()

    @property
    def embed_dims(self):
        """D: the memory's channels."""
        return self.input_proj[0][0].out_channels

    def loss(self, feats, pixel_mask, data_samples):
        """The head's own losses plus each auxiliary head's (``*{i}``) and its positive
        queries' (``*_aux{i}``, ``d{j}.*_aux{i}``)."""
        encoded = self.encode(feats, pixel_mask)
        losses = self.output_losses(self.decode_queries(encoded, data_samples), data_samples)
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
            reference, targets, indices, chosen = positive_queries(
                anchors, tg['labels'], tg['boxes'], sizes, self.num_classes, self.draws,
                self.max_pos_queries, self.min_pos_queries)
            out = self.positive_query_outputs(i, reference, encoded, maps, chosen)
            num_pos = num_boxes_across_ranks(targets, reference.device)  # positives, >= 1
            last = out['pred_logits'].shape[0] - 1
            for j in range(last + 1):
                layer = dict(pred_logits=out['pred_logits'][j], pred_boxes=out['pred_boxes'][j])
                tag = '' if j == last else f'd{j}.'
                losses.update({f'{tag}{k}_aux{i}': v for k, v in self.loss_by_layer(
                    layer, targets, num_pos, indices=indices).items()})
        return losses

    def reference_sine(self, reference, dtype):
        """Normalised cxcywh anchors [B, T, 4] -> their sine embedding [B, T, 2D] (the
        anchor clamped into (0, 1) as ``inverse_sigmoid`` does)."""
        return box_sine_embedding(inverse_sigmoid(reference).sigmoid(),
                                  self.embed_dims // 2).to(dtype)

    def positive_query_outputs(self, head_idx, reference, encoded, maps, chosen):
        """reference [B, T, 4] (normalised cxcywh anchors) -> every decoder layer's
        ``pred_logits`` [N, B, T, K] and ``pred_boxes`` [N, B, T, 4] for these queries alone
        (``positive_query_embeddings`` through the head's decoder)."""
        memory, mask, shapes, ratios = encoded
        tgt, query_pos = self.positive_query_embeddings(head_idx, reference, maps, chosen)
        hs, refs = run_in_fp32(
            self.transformer.decode, tgt, query_pos, reference.to(memory.dtype), memory, mask,
            shapes, ratios, bbox_embed=self.bbox_embed if self.with_box_refine else None,
            **self.decode_kwargs())
        return self.layer_predictions(hs, refs)
