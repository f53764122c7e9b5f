"""Mask2Former's transformer decoder with its prediction heads (Cheng et al. 2022, Sec. 3.2):
learned queries refined by masked-attention layers over the pixel decoder's memory, a class
and a mask prediction after every layer."""
import torch
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.masked_attention import (
    MaskedAttentionDecoderLayer,
    masked_attention_mask,
)
from densevit.models.layers.mlp import MLP
from densevit.models.layers.sine_position_encoding import SinePositionalEncoding2D
from densevit.models.losses.mask_criterion import head_criterion
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT

from .pixel_decoder import sine_positions


@MODELS.register_module()
class Mask2FormerHead(BaseModule):
    """Q queries -> ``num_layers`` + 1 sets of class and mask logits.

    Each query has learnable features (``query_feat``) and a learnable position
    (``query_embed``). Layer i (:class:`~densevit.models.layers.masked_attention.
    MaskedAttentionDecoderLayer`) attends to memory level ``i % num_levels`` (round robin,
    coarsest first), whose pixels carry sine positions and a ``level_embed`` row (after a 1x1
    ``input_proj`` when the memory is not D wide), masked by the prediction before it. A
    prediction, from the queries before the first layer and after each layer, is: the
    LayerNorm-ed queries (``decoder_norm``) -> class logits (``class_embed``, Linear to K+1,
    index K "no object") and mask embeddings (``mask_embed``, a 3-layer ReLU MLP) whose dot
    product with the per-pixel embedding gives the mask logits. Every prediction is supervised
    (the segmentor's loss); inference reads the last.

    Args:
        num_classes (int): K.
        in_channels (int): the memory's channels (the pixel decoder's ``feat_channels``).
        mask_channels (int): the per-pixel embedding's channels (its ``out_channels``).
        num_queries (int): Q (100).
        embed_dims (int): D (256).
        num_layers (int): decoder layers (9: three rounds over three levels).
        num_heads (int): 8.
        feedforward_channels (int): 2048.
        dropout (float): 0.0.
        num_levels (int): memory levels (3).
        enforce_input_proj (bool): a 1x1 ``input_proj`` even when ``in_channels`` is D.
        criterion (dict): the loss, default ``dict(type='MaskSetCriterion', num_classes=K)``
            (weights 2 / 5 / 5, no-object weight 0.1, 12544 points); ``num_classes`` is
            filled in.

    Shapes:
        forward(memory: list of ``num_levels`` [B, in_channels, H_l, W_l] coarsest first,
        mask_features [B, mask_channels, H, W]) -> (mask logits: tuple of ``num_layers`` + 1
        [B, Q, H, W], class logits: tuple of [B, Q, K+1]), the prediction before the first
        layer first.
    """

    def __init__(self, num_classes, in_channels=256, mask_channels=256, num_queries=100,
                 embed_dims=256, num_layers=9, num_heads=8, feedforward_channels=2048,
                 dropout=0.0, num_levels=3, enforce_input_proj=False, criterion=DEFAULT,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        criterion = head_criterion(criterion, num_classes, 'Mask2FormerHead')
        D = embed_dims
        self.num_classes, self.num_queries = num_classes, num_queries
        self.in_channels, self.num_levels, self.num_heads = in_channels, num_levels, num_heads
        project = in_channels != D or enforce_input_proj
        self.input_proj = nn.ModuleList(
            nn.Conv2d(in_channels, D, 1) if project else nn.Identity() for _ in range(num_levels))
        self.level_embed = nn.Parameter(torch.empty(num_levels, D))
        self.positional_encoding = SinePositionalEncoding2D(D // 2, normalize=True)
        self.query_feat = nn.Embedding(num_queries, D)
        self.query_embed = nn.Embedding(num_queries, D)
        self.layers = nn.ModuleList(
            MaskedAttentionDecoderLayer(D, num_heads, feedforward_channels, dropout)
            for _ in range(num_layers))
        self.decoder_norm = nn.LayerNorm(D)
        self.class_embed = nn.Linear(D, num_classes + 1)
        self.mask_embed = MLP(D, D, mask_channels, 3)
        self.criterion = MODELS.build(criterion)
        self._reset_parameters()

    def _reset_parameters(self):
        """Xavier-uniform attention and FFN matrices (the paper code's decoder init), level
        embeddings N(0, 1)."""
        for layer in self.layers:
            for p in layer.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        nn.init.normal_(self.level_embed)

    def predict(self, query, mask_features, size):
        """query [B, Q, D], mask_features [B, C, H, W] -> (mask logits [B, Q, H, W], class
        logits [B, Q, K+1], the next layer's attention mask for a map of ``size`` (None: no
        next layer))."""
        x = self.decoder_norm(query)
        mask_logits = torch.einsum('bqc,bchw->bqhw', self.mask_embed(x), mask_features)
        attn_mask = (None if size is None
                     else masked_attention_mask(mask_logits, size, self.num_heads))
        return mask_logits, self.class_embed(x), attn_mask

    def forward(self, memory, mask_features):
        """See the class docstring."""
        if len(memory) != self.num_levels:
            raise ValueError(f'Mask2FormerHead: got {len(memory)} memory levels, built for '
                             f'num_levels={self.num_levels}')
        sizes = [tuple(x.shape[-2:]) for x in memory]
        positions = [sine_positions(self.positional_encoding, x) for x in memory]
        levels = [(proj(x).flatten(2) + self.level_embed[i][:, None]).transpose(1, 2)
                  for i, (proj, x) in enumerate(zip(self.input_proj, memory, strict=True))]
        B = mask_features.shape[0]
        query = self.query_feat.weight[None].expand(B, -1, -1)
        query_pos = self.query_embed.weight[None].expand(B, -1, -1)
        mask_logits, class_logits, attn_mask = self.predict(query, mask_features, sizes[0])
        masks, classes = [mask_logits], [class_logits]
        for i, layer in enumerate(self.layers):
            level = i % self.num_levels
            query = layer(query, query_pos, levels[level], positions[level], attn_mask)
            last = i == len(self.layers) - 1
            mask_logits, class_logits, attn_mask = self.predict(
                query, mask_features, None if last else sizes[(i + 1) % self.num_levels])
            masks.append(mask_logits)
            classes.append(class_logits)
        return tuple(masks), tuple(classes)
