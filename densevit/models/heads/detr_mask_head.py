"""DETR's panoptic mask head (Carion et al. 2020, Sec. 4.4, Fig. 8): a binary mask for each
object query of a trained box detector, from the query's attention maps over the encoder
output and an FPN-like convolutional decoder over the backbone's finer maps."""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.mask_fpn_decoder import MaskFPNDecoder
from densevit.models.layers.query_attention_map import QueryAttentionMap
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default
from densevit.utils.precision import at_least_fp32

from ..losses.dense_mask_loss import dense_mask_losses, upsampled_masks


@MODELS.register_module()
class DETRMaskHead(BaseModule):
    """Mask logits of every query (or of the given ones), and DETR's mask losses on the
    matched ones.

    The query attention maps (``attention``, :class:`QueryAttentionMap`: N heads) of each
    decoder output over the encoder memory are stacked on the projected backbone map
    (``input_proj``'s output, D channels) and decoded by :class:`MaskFPNDecoder`
    (``decoder``) with the backbone's finer maps (ResNet: strides 16, 8, 4, so masks at
    stride 4; a plain ViT's single map: no finer map, masks at its stride).

    Args:
        embed_dims (int): D, the detector's transformer width (``DETRPanoptic`` fills it in
            from ``bbox_head.embed_dims``).
        num_heads (int): N attention heads of the maps (DETR: the transformer's, 8).
        fpn_channels (Sequence[int]): channels of the finer maps, coarsest first
            (``DETRPanoptic`` fills them in from the maps it takes).
        norm_groups (int): GroupNorm groups of the decoder, at most the channels (8).
        loss_weights (dict): ``loss_mask`` (focal) and ``loss_dice``; DETR's
            ``dict(loss_mask=1.0, loss_dice=1.0)``.
        focal_alpha, focal_gamma (float): the focal loss' α (0.25) and γ (2).

    Shapes: see :meth:`forward`.
    """

    def __init__(self, embed_dims=256, num_heads=8, fpn_channels=(1024, 512, 256), norm_groups=8,
                 loss_weights=DEFAULT, focal_alpha=0.25, focal_gamma=2.0, init_cfg=None):
        super().__init__(init_cfg)
        self.loss_weights = dict(resolve_default(loss_weights,
                                                 dict(loss_mask=1.0, loss_dice=1.0)))
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma
        self.attention = QueryAttentionMap(embed_dims, num_heads)
        self.decoder = MaskFPNDecoder(embed_dims + num_heads, embed_dims, tuple(fpn_channels),
                                      norm_groups)
        for proj in (self.attention.q_proj, self.attention.k_proj):  # DETR's initialisation
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, queries, memory, src, mask, fpn_feats, selected=None):
        """queries [B, Q, D] (the last decoder layer's outputs), memory [B, D, h, w] (the
        encoder's output), src [B, D, h, w] (the projected backbone map), mask [B, h, w] bool
        (True = padding), fpn_feats: finer maps [B, C_i, H_i, W_i], coarsest first ->
        mask logits [B, Q, H_n, W_n] (H_n the finest map's, else h).

        ``selected`` (image indices [M], query indices [M]; e.g. ``matched_queries``): the
        masks of those queries only, [M, H_n, W_n], each equal to its entry of the full
        output (the decoder treats every query apart); training decodes the matched queries
        alone, a few of the Q."""
        B, Q = queries.shape[:2]
        maps = self.attention(queries, memory, mask)  # [B, Q, N, h, w]
        if selected is not None:
            image, query = selected
            logits = self.decoder(torch.cat([src[image], maps[image, query]], dim=1),
                                  list(fpn_feats), image_index=image)  # [M, 1, H, W]
            return logits[:, 0]
        x = torch.cat([src[:, None].expand(-1, Q, -1, -1, -1), maps], dim=2).flatten(0, 1)
        logits = self.decoder(x, list(fpn_feats))  # [B·Q, 1, H, W]
        return logits.view(B, Q, *logits.shape[-2:])

    def loss(self, mask_logits, targets, indices, num_masks, size):
        """DETR's mask losses of the matched queries.

        Args:
            mask_logits: [M, h, w], the matched queries' alone, in
                ``matched_queries(indices)`` order (``forward(..., selected=...)``).
            targets (list[Tensor]): per image its targets' masks [N_i, h_i, w_i] bool (the
                image's unpadded size, at most ``size``).
            indices (list[tuple]): (query indices, target indices) per image: the matching.
            num_masks (float): the normaliser (targets in the batch, at least 1).
            size (tuple[int, int]): the padded input's (H, W); the predictions are resized to
                it and, with the targets, kept on the batch's largest image (DETR's targets
                are padded to that size).

        Returns:
            dict: ``loss_mask`` (sigmoid focal), ``loss_dice`` (weighted).
        """
        crop = (max(t.shape[-2] for t in targets), max(t.shape[-1] for t in targets))
        pred = upsampled_masks(at_least_fp32(mask_logits), size, crop)
        target = torch.cat([F.pad(t[j.to(t.device)].to(pred), (0, crop[1] - t.shape[-1],
                                                               0, crop[0] - t.shape[-2]))
                            for t, (_, j) in zip(targets, indices, strict=True)])
        loss_mask, loss_dice = dense_mask_losses(pred, target, num_masks, self.focal_alpha,
                                                 self.focal_gamma)
        w = self.loss_weights
        return dict(loss_mask=loss_mask * w['loss_mask'], loss_dice=loss_dice * w['loss_dice'])
