"""DAB-DETR's transformer (Liu et al. 2022, "DAB-DETR: Dynamic Anchor Boxes are Better
Queries for DETR", §4).

The queries are 4-d anchor boxes A = (x, y, w, h), refined layer by layer: after
each decoder layer the shared box head predicts Δ and A' = sigmoid(Δ + sigmoid⁻¹(A))
(detached before it feeds the next layer, §4.3). In each layer the positional query
is P_q = MLP(PE(A)) (``ref_point_head``, 2D -> D -> D) and the spatial part of the
cross-attention query is PE(x, y) ⊙ MLP(C_q) (``query_scale``; the identity in the
first layer), with width / height modulation (§4.4): the x features are scaled by
w_ref / w and the y features by h_ref / h, where (w_ref, h_ref) = sigmoid(MLP(C_q))
(``ref_anchor_head``). The decoder layer itself is Conditional DETR's
(:class:`ConditionalDecoderLayer`, the same math); the encoder layer is DETR's with
its position encoding scaled by MLP(x) before every layer (``encoder_query_scale``).
Both use PReLU in their FFNs.
"""
import torch

from .conditional_detr_transformer import ConditionalDetrTransformer, anchor_sine
from .deformable_detr_transformer import inverse_sigmoid
from .mlp import MLP


class DabDetrTransformer(ConditionalDetrTransformer):
    """DETR's encoder (PReLU FFN, scaled positions) + DAB-DETR's anchor-box decoder.

    Args: as :class:`ConditionalDetrTransformer`; defaults are DAB-DETR's: dropout 0,
        PReLU, positional query in the first layer's cross-attention only.
    """

    def __init__(self, embed_dims=256, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                 feedforward_channels=2048, dropout=0.0, activation='prelu',
                 keep_query_pos=False):
        super().__init__(embed_dims, num_heads, num_encoder_layers, num_decoder_layers,
                         feedforward_channels, dropout, activation, keep_query_pos)
        self.encoder_query_scale = MLP(embed_dims, embed_dims, embed_dims, 2)
        self.ref_anchor_head = MLP(embed_dims, embed_dims, 2, 2)
        self._reset_parameters()

    @staticmethod
    def build_ref_point_head(embed_dims):
        """PE(anchor) [.., 2D] -> positional query [.., D]."""
        return MLP(2 * embed_dims, embed_dims, embed_dims, 2)

    def encode(self, src, mask, pos):
        """As DETR's encoder, with each layer's position encoding scaled by MLP(its input)."""
        for layer in self.encoder:
            src = layer(src, pos=pos * self.encoder_query_scale(src), key_padding_mask=mask)
        return src

    def forward(self, src, mask, pos, anchors, bbox_embed):
        """Run encoder and decoder.

        Args:
            src, pos [B, N, D]; mask [B, N] (True = padding): as the parent's.
            anchors [B, Q, 4]: the learned anchor boxes before the sigmoid (cxcywh).
            bbox_embed (nn.Module): the head's box predictor (D -> 4), which also refines
                the anchors between layers.

        Returns:
            hs [L, B, Q, D]: every layer's output after the final LayerNorm.
            anchors [L, B, Q, 4]: the anchor each layer's boxes are relative to (sigmoid
            space): the initial anchors, then each layer's refinement of them (these keep
            their gradient; the copies fed to the next layer are detached).
        """
        memory = self.encode(src, mask, pos)
        half = self.embed_dims // 2
        anchor = anchors.sigmoid()
        refs, hs = [anchor], []
        out = torch.zeros(anchors.shape[:-1] + (self.embed_dims,), dtype=src.dtype,
                          device=src.device)
        for i, layer in enumerate(self.decoder):
            sine = anchor_sine(anchor, half)  # [B, Q, 2D]: y, x, w, h features
            query_pos = self.ref_point_head(sine)
            spatial = sine[..., :self.embed_dims]
            if i > 0:
                spatial = spatial * self.query_scale(out)
            wh_ref = self.ref_anchor_head(out).sigmoid()  # [B, Q, 2]: (w_ref, h_ref)
            spatial = torch.cat([
                spatial[..., :half] * (wh_ref[..., 1] / anchor[..., 3])[..., None],
                spatial[..., half:] * (wh_ref[..., 0] / anchor[..., 2])[..., None]], -1)
            out = layer(out, memory, pos, query_pos, spatial, mask)
            hs.append(self.decoder_norm(out))
            refined = (bbox_embed(out) + inverse_sigmoid(anchor)).sigmoid()
            if i < len(self.decoder) - 1:
                refs.append(refined)
            anchor = refined.detach()
        return torch.stack(hs), torch.stack(refs)
