"""Denoising queries (DN-DETR, Li et al. 2022; contrastive variant of DINO, Zhang et al. 2022).

During training, noised copies of the ground truth enter the decoder as extra
queries placed *before* the matching queries. Each copy is asked to reconstruct
the box and label it came from, with a fixed assignment (no Hungarian matching),
which gives the decoder an easy, stable target from the first iteration.

Layout of the decoder's query axis (length ``num_dn + Q``)::

    [group 0 | group 1 | ... | group G-1 | Q matching queries]

A group holds ``pad`` slots (``pad`` = the most GT boxes of any image in the
batch; with contrastive denoising 2·pad: positives then negatives). Image i fills
its first n_i slots; the rest are padding (zero content, no loss except
"no object"). The self-attention mask (True = blocked) hides every DN query from
the matching queries (they must not peek at the answers) and every group from
the others; DN queries may look at the matching queries.

Query content of a DN query: ``tgt`` = embedding of the (noised) label; its
position ``query_pos`` = MLP(sine embedding of the noised box), and the noised box
is returned for detectors with reference points. For vanilla DETR (learned
``query_pos``, zero ``tgt``) this is a practical adaptation, not DN-DETR's exact
formulation (which relies on DAB-DETR's anchor boxes): matching queries keep
DETR's learned positions and zero content.
"""
import math

import torch
from torch import nn

from densevit.models.layers.mlp import MLP


def box_sine_embedding(boxes, num_feats=128, temperature=10000):
    """boxes [..., 4] in [0, 1] -> [..., 4·num_feats]: per coordinate, sin/cos of
    2π·coordinate over ``num_feats`` frequencies (interleaved), as DETR's sine encoding."""
    dim_t = torch.arange(num_feats, dtype=torch.float32, device=boxes.device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode='floor') / num_feats)
    pos = boxes[..., None].float() * (2 * math.pi) / dim_t  # [..., 4, F]
    pos = torch.stack([pos[..., 0::2].sin(), pos[..., 1::2].cos()], -1).flatten(-2)
    return pos.flatten(-2)


class DenoisingQueries(nn.Module):
    """Builds denoising queries, their attention mask and their fixed assignment.

    Args:
        num_classes (int): K.
        embed_dims (int): D.
        label_noise_scale (float): a label is replaced by a random class with
            probability ``label_noise_scale / 2`` (DINO's convention; 0.5 -> 25 %).
        box_noise_scale (float): centre moved by up to ``scale·(w/2, h/2)``, width and
            height scaled by a factor in ``[1 − scale, 1 + scale]`` (DN-DETR).
        num_dn_queries (int): total DN queries; groups = max(1, num_dn_queries // pad)
            (the batch's most GT boxes decides ``pad``), unless ``num_groups`` is given.
        num_groups (int | None): fixed number of groups.
        contrastive (bool): DINO's contrastive denoising: each group also holds a
            negative copy of every box, noised between ``box_noise_scale`` and
            ``2·box_noise_scale`` (relative), whose target is "no object".
        noise (str): ``'centre'`` (DN-DETR: centre shifted, width / height scaled) or
            ``'corners'`` (DINO: each corner of the xyxy box moved by up to
            ``scale·(w/2, h/2)``, clamped to the image).
        group_rule (str): ``'queries'``: groups = num_dn_queries // (group size), so the DN
            queries never exceed ``num_dn_queries``; ``'boxes'`` (DINO's code): groups =
            num_dn_queries // (most GT boxes), the negatives coming on top.
        box_pos (bool): give the DN queries a positional query MLP(sine(noised box));
            False for heads that derive every query's position from its reference box
            (DINO): ``query_pos`` is then None.
    """

    def __init__(self, num_classes, embed_dims, label_noise_scale=0.5, box_noise_scale=1.0,
                 num_dn_queries=100, num_groups=None, contrastive=False, noise='centre',
                 group_rule='queries', box_pos=True):
        super().__init__()
        self.num_classes = num_classes
        self.label_noise_scale = label_noise_scale
        self.box_noise_scale = box_noise_scale
        self.num_dn_queries = num_dn_queries
        self.num_groups = num_groups
        self.contrastive = contrastive
        if noise not in ('centre', 'corners'):
            raise ValueError(f"DenoisingQueries: noise must be 'centre' or 'corners', got "
                             f'{noise!r}')
        if group_rule not in ('queries', 'boxes'):
            raise ValueError(f"DenoisingQueries: group_rule must be 'queries' or 'boxes', "
                             f'got {group_rule!r}')
        self.noise, self.group_rule = noise, group_rule
        self.label_embed = nn.Embedding(num_classes, embed_dims)
        self.num_feats = embed_dims // 2
        self.box_pos = MLP(4 * self.num_feats, embed_dims, embed_dims, 2) if box_pos else None

    def _noise_boxes(self, boxes, lo, hi):
        """boxes [N, 4] cxcywh -> noised, relative noise magnitude uniform in [lo, hi)."""
        sign = torch.randint(0, 2, boxes.shape, device=boxes.device) * 2.0 - 1.0
        mag = lo + torch.rand_like(boxes) * (hi - lo)
        half = boxes[:, 2:] / 2
        if self.noise == 'corners':
            corners = torch.cat([boxes[:, :2] - half, boxes[:, :2] + half], -1)
            corners = (corners + sign * mag * half.repeat(1, 2) * self.box_noise_scale).clamp(0, 1)
            return torch.cat([(corners[:, :2] + corners[:, 2:]) / 2,
                              corners[:, 2:] - corners[:, :2]], -1)
        diff = torch.cat([half, boxes[:, 2:]], -1) * self.box_noise_scale
        noised = boxes + sign * mag * diff
        return torch.cat([noised[:, :2].clamp(0, 1), noised[:, 2:].clamp(1e-3, 1)], -1)

    def _noise_labels(self, labels):
        flip = torch.rand(labels.shape, device=labels.device) < self.label_noise_scale * 0.5
        random = torch.randint_like(labels, 0, self.num_classes)
        return torch.where(flip, random, labels)

    @torch.no_grad()
    def _layout(self, targets, device):
        """Noised labels/boxes and padding flags, each [B, G·group_size(, 4)]."""
        sizes = [len(t['labels']) for t in targets]
        pad = max(sizes)
        parts = 2 if self.contrastive else 1
        per_group = pad * parts if self.group_rule == 'queries' else pad
        groups = self.num_groups or max(1, self.num_dn_queries // per_group)
        size = pad * parts
        B = len(targets)
        labels = torch.zeros(B, groups, size, dtype=torch.long, device=device)
        boxes = torch.full((B, groups, size, 4), 0.5, device=device)
        real = torch.zeros(B, groups, size, dtype=torch.bool, device=device)
        for i, t in enumerate(targets):
            n = sizes[i]
            if n == 0:
                continue
            gt_labels = t['labels'].to(device).repeat(groups)
            gt_boxes = t['boxes'].to(device).float().repeat(groups, 1)
            pos = self._noise_boxes(gt_boxes, 0.0, 1.0).view(groups, n, 4)
            labels[i, :, :n] = self._noise_labels(gt_labels).view(groups, n)
            boxes[i, :, :n] = pos
            real[i, :, :n] = True
            if self.contrastive:
                neg = self._noise_boxes(gt_boxes, 1.0, 2.0).view(groups, n, 4)
                labels[i, :, pad:pad + n] = self._noise_labels(gt_labels).view(groups, n)
                boxes[i, :, pad:pad + n] = neg
                real[i, :, pad:pad + n] = True
        return labels, boxes, real, groups, pad

    def attn_mask(self, groups, group_size, num_queries, device):
        """[T, T] bool, T = groups·group_size + num_queries; True = query (row) may not
        attend to key (column)."""
        num_dn = groups * group_size
        total = num_dn + num_queries
        mask = torch.zeros(total, total, dtype=torch.bool, device=device)
        mask[num_dn:, :num_dn] = True  # matching queries never see DN queries
        for g in range(groups):
            s, e = g * group_size, (g + 1) * group_size
            mask[s:e, :s] = True
            mask[s:e, e:num_dn] = True
        return mask

    def forward(self, targets, num_queries):
        """
        Args:
            targets (list[dict]): ``labels`` [N_i], ``boxes`` [N_i, 4] normalised cxcywh.
            num_queries (int): Q matching queries that follow the DN queries.

        Returns:
            dict | None (None when the batch has no GT box): ``tgt`` [B, N_dn, D],
            ``query_pos`` [B, N_dn, D] (None without ``box_pos``), ``boxes`` [B, N_dn, 4] (noised, cxcywh),
            ``attn_mask`` [N_dn+Q, N_dn+Q] bool, ``num_dn`` (int), ``num_groups`` (int),
            ``indices`` (list of (DN query idx, target idx) per image, the fixed
            assignment of positive queries), ``group_size`` (int).
        """
        device = self.label_embed.weight.device
        if sum(len(t['labels']) for t in targets) == 0:
            return None
        labels, boxes, real, groups, pad = self._layout(targets, device)
        B, G, size = labels.shape
        tgt = self.label_embed(labels) * real[..., None]
        query_pos = None if self.box_pos is None else \
            self.box_pos(box_sine_embedding(boxes, self.num_feats)).view(B, G * size, -1)
        indices = []
        for t in targets:
            n = len(t['labels'])
            tgt_idx = torch.arange(n, dtype=torch.int64)
            src = torch.cat([g * size + tgt_idx for g in range(G)]) if n else tgt_idx
            indices.append((src, tgt_idx.repeat(G)))
        return dict(tgt=tgt.view(B, G * size, -1), query_pos=query_pos,
                    boxes=boxes.view(B, G * size, 4),
                    attn_mask=self.attn_mask(G, size, num_queries, device),
                    num_dn=G * size, num_groups=G, group_size=size, indices=indices)
