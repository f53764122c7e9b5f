"""Deformable DETR (Zhu et al. 2021): DETR's detector on several feature levels."""
from densevit.registry import MODELS

from .detr import DETR


@MODELS.register_module()
class DeformableDETR(DETR):
    """``backbone -> [neck] -> DeformableDETRHead`` on multi-scale features.

    Same training / inference modes as :class:`DETR` (``forward`` is DETR's); the head
    receives every selected level and the padding mask at input resolution [B, H, W]
    (it resizes the mask per level, also for the extra levels it makes itself).

    Args:
        backbone, neck, bbox_head (dict): configs; ``bbox_head.in_channels`` defaults to
            the channels of the levels it reads.
        feat_indices (Sequence[int] | None): which backbone / neck outputs feed the head
            (None: all). E.g. ResNet ``out_indices=(1, 2, 3)`` (strides 8, 16, 32) plus
            one extra stride-64 level made by the head; or SimpleFeaturePyramid's 4 maps.
    """

    def __init__(self, backbone, bbox_head, neck=None, feat_indices=None,
                 data_preprocessor=None, train_cfg=None, test_cfg=None, init_cfg=None):
        # set before DETR's __init__, which asks head_in_channels for the head's input widths
        self.feat_indices = None if feat_indices is None else tuple(feat_indices)
        super().__init__(backbone, bbox_head, neck=neck, feat_index=None,
                         data_preprocessor=data_preprocessor, train_cfg=train_cfg,
                         test_cfg=test_cfg, init_cfg=init_cfg)

    def _select(self, items):
        items = list(items)
        return items if self.feat_indices is None else [items[i] for i in self.feat_indices]

    def head_in_channels(self, channels):
        return self._select(channels)

    def extract_feat(self, inputs):
        """inputs [B, 3, H, W] -> tuple of the selected maps [B, C_l, H_l, W_l]."""
        feats = self.backbone(inputs)
        if self.neck is not None:
            feats = self.neck(feats)
        return tuple(self._select(feats))

    @staticmethod
    def padding_mask(inputs, feat, data_samples):
        """[B, H, W] bool at input resolution, True on batch padding."""
        return DETR.pixel_mask(inputs, data_samples)

    @staticmethod
    def feature_mask(pixel_mask, feat):
        """The head takes the pixel mask [B, H, W] itself (it resizes it per level)."""
        return pixel_mask
