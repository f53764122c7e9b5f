"""Two-stage Deformable DETR's first stage (Zhu et al. 2021, §4.2 and App. A.4).

Every pixel of the encoder memory is an object query that predicts a box relative to
a fixed proposal centred on it (width / height 0.05·2^l on level l); the top-scoring
encoder boxes become the decoder's reference boxes, and their sine embedding,
projected, gives the decoder queries (position and content halves).
"""
import torch
from torch import nn

from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.models.layers.ms_deform_attn import level_shapes

from .denoising import box_sine_embedding


def pixel_proposals(mask, spatial_shapes, base_size=0.05, eps=0.01):
    """One proposal per pixel, in inverse-sigmoid space.

    Args:
        mask (Tensor): [B, S] bool, True on padding (levels flattened one after another).
        spatial_shapes (Tensor | list): [L, 2] (H_l, W_l).
        base_size (float): proposal width = height on level 0, doubled per level.
        eps (float): proposals with a coordinate outside (eps, 1 − eps) are invalid.

    Returns:
        proposals [B, S, 4] (cx, cy, w, h) logits, +inf where padded or invalid;
        valid [B, S] bool.
    """
    B = mask.shape[0]
    boxes, start = [], 0
    for lvl, (H, W) in enumerate(level_shapes(spatial_shapes)):
        m = mask[:, start:start + H * W].view(B, H, W)
        start += H * W
        size = torch.stack([(~m[:, 0, :]).sum(1), (~m[:, :, 0]).sum(1)], -1).float()  # w, h
        y, x = torch.meshgrid(torch.arange(H, dtype=torch.float32, device=mask.device),
                              torch.arange(W, dtype=torch.float32, device=mask.device),
                              indexing='ij')
        centre = (torch.stack([x, y], -1).view(1, H * W, 2) + 0.5) / size[:, None]
        wh = torch.full_like(centre, base_size * 2.0 ** lvl)
        boxes.append(torch.cat([centre, wh], -1))
    boxes = torch.cat(boxes, 1)
    valid = ((boxes > eps) & (boxes < 1 - eps)).all(-1) & ~mask
    proposals = inverse_sigmoid(boxes, eps=0).masked_fill(~valid[..., None], float('inf'))
    return proposals, valid


class EncoderProposals(nn.Module):
    """Per-pixel proposals from the encoder memory, and decoder queries from the chosen ones.

    Args:
        embed_dims (int): D.
        base_size (float): a proposal's width = height on the first level, doubled per
            level (0.05, Deformable DETR's).
        with_queries (bool): build :meth:`queries`' projection (False for DINO, whose
            queries' positions come from the decoder and content is learned).
    """

    def __init__(self, embed_dims=256, base_size=0.05, with_queries=True):
        super().__init__()
        self.base_size = base_size
        self.memory_fc = nn.Linear(embed_dims, embed_dims)
        self.memory_norm = nn.LayerNorm(embed_dims)
        if with_queries:
            self.pos_fc = nn.Linear(2 * embed_dims, 2 * embed_dims)
            self.pos_norm = nn.LayerNorm(2 * embed_dims)
        self.embed_dims = embed_dims

    def forward(self, memory, mask, spatial_shapes):
        """memory [B, S, D], mask [B, S] (True = padding), spatial_shapes [L, 2] ->
        (pixel queries [B, S, D] for the encoder's class / box predictors,
        proposals [B, S, 4] logits, +inf where invalid)."""
        proposals, valid = pixel_proposals(mask, spatial_shapes, self.base_size)
        memory = memory.masked_fill(~valid[..., None], 0.0)
        return self.memory_norm(self.memory_fc(memory)), proposals

    def queries(self, box_logits):
        """box_logits [B, Q, 4] (the chosen encoder boxes, inverse-sigmoid) ->
        (query_pos [B, Q, D], tgt [B, Q, D])."""
        pos = box_sine_embedding(box_logits.sigmoid(), self.embed_dims // 2)
        pos = self.pos_norm(self.pos_fc(pos.to(box_logits.dtype)))
        return pos.split(self.embed_dims, -1)
