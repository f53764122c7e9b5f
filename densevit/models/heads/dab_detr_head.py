"""DAB-DETR's head (Liu et al. 2022): Conditional DETR's head with learned 4-d anchor boxes
as queries, refined by the shared box predictor in every decoder layer."""
from torch import nn

from densevit.models.layers.dab_detr_transformer import DabDetrTransformer
from densevit.models.layers.deformable_detr_transformer import inverse_sigmoid
from densevit.registry import MODELS

from .conditional_detr_head import ConditionalDETRHead


@MODELS.register_module()
class DABDETRHead(ConditionalDETRHead):
    """DAB-DETR head on one feature map (the ``DETR`` detector's).

    Args: as :class:`ConditionalDETRHead`, with DAB-DETR's defaults: ``transformer`` are
    kwargs of :class:`DabDetrTransformer` (dropout 0, PReLU), the image position
    encoding has temperature 20, the focal loss weight is 1, ``num_dets`` 300; and

        random_xy (bool): draw the anchors' centres uniformly in [0, 1] (the official
            ``--random_refpoints_xy`` initialisation; its attempt to freeze them sets
            ``requires_grad`` on a slice of ``.data``, which freezes nothing, so here too
            they are trained).

    ``anchor_embed`` [Q, 4] holds the anchors before the sigmoid (cxcywh).
    """

    transformer_type = DabDetrTransformer
    default_cls_weight = 1.0
    default_temperature = 20

    def __init__(self, num_classes, in_channels, embed_dims=256, num_queries=300,
                 num_dets=300, random_xy=False, **kwargs):
        super().__init__(num_classes, in_channels, embed_dims, num_queries, num_dets=num_dets,
                         **kwargs)
        if random_xy:
            xy = self.anchor_embed.weight.data[:, :2]
            xy.copy_(inverse_sigmoid(xy.uniform_(0, 1)))

    def init_queries(self, num_queries, embed_dims):
        self.anchor_embed = nn.Embedding(num_queries, 4)

    def decode(self, src, mask, pos):
        """src, pos [B, N, D], mask [B, N] -> (hs [L, B, Q, D], anchors [L, B, Q, 4])."""
        anchors = self.anchor_embed.weight.unsqueeze(0).expand(src.shape[0], -1, -1)
        return self.transformer(src, mask, pos, anchors, self.bbox_embed)

