"""Mask2Former's masked attention (Cheng et al. 2022, Sec. 3.2.1, Eq. 2): each query's
cross-attention restricted to the foreground of the mask it predicted before the layer, and
the decoder layer built around it."""
import torch.nn.functional as F

from .detr_transformer import DetrDecoderLayer


def masked_attention_mask(mask_logits, size, num_heads):
    """The attention mask a prediction sets for the next layer's cross-attention.

    Args:
        mask_logits: [B, Q, h, w] the predicted masks.
        size (tuple[int, int]): (H, W) of the map the next layer attends to.
        num_heads (int): the attention's heads.

    Returns:
        bool [B * num_heads, Q, H*W] (batch-major, as ``nn.MultiheadAttention`` takes it),
        True where query q may not attend: its mask, resized bilinearly to the map, has
        sigmoid < 0.5 there. A query whose mask is empty everywhere attends everywhere
        instead (its row would otherwise have no key).
    """
    masked = F.interpolate(mask_logits.detach(), size=size, mode='bilinear',
                           align_corners=False).sigmoid().flatten(2) < 0.5
    masked = masked & ~masked.all(-1, keepdim=True)
    return masked.repeat_interleave(num_heads, dim=0)


class MaskedAttentionDecoderLayer(DetrDecoderLayer):
    """DETR's decoder layer (the same modules: ``self_attn`` and ``norm1``, ``cross_attn`` and
    ``norm2``, ``ffn`` and ``norm3``; post-norm) run in Mask2Former's order: masked
    cross-attention to one level of the memory first, then self-attention among the queries,
    then the FFN (Sec. 3.2.2: the order of self- and cross-attention switched against DETR's).

    Args:
        embed_dims (int): D (256).
        num_heads (int): 8.
        feedforward_channels (int): FFN width (2048).
        dropout (float): attention, residual and FFN dropout (Mask2Former: 0.0).
    """

    def forward(self, query, query_pos, memory, memory_pos, attn_mask=None):
        """query, query_pos [B, Q, D]; memory, memory_pos [B, S, D] (one level, flattened);
        attn_mask bool [B * heads, Q, S] (True: may not attend;
        :func:`masked_attention_mask`) -> [B, Q, D]."""
        capture = self.record_cross_attn is not None  # an analysis tool's (DETR's layer)
        attn, weights = self.cross_attn(query + query_pos, memory + memory_pos, memory,
                                        attn_mask=attn_mask, need_weights=capture,
                                        average_attn_weights=False)
        if capture:
            self.record_cross_attn(weights)
        query = self.norm2(query + self.dropout2(attn))
        q = k = query + query_pos
        attn = self.self_attn(q, k, query, need_weights=False)[0]
        query = self.norm1(query + self.dropout1(attn))
        return self.norm3(query + self.dropout3(self.ffn(query)))
