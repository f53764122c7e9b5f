"""DETR: a backbone (+ optional neck) and a set-prediction head (Carion et al. 2020)."""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModel

from densevit.models.size_groups import SizeGroupedPredict
from densevit.registry import MODELS


@MODELS.register_module()
class DETR(SizeGroupedPredict, BaseModel):
    """End-to-end detector ``backbone -> [neck] -> bbox_head``.

    Args:
        backbone, neck, bbox_head (dict): configs; ``bbox_head.in_channels`` defaults to
            the channels of the feature map it reads.
        feat_index (int): which backbone/neck output feeds the head (-1: the last).
        data_preprocessor (dict): usually ``DetDataPreprocessor``.

    ``val_step`` / ``test_step`` predict each group of same-size images of a batch on its
    own (``densevit/models/size_groups.py``): the padding mask reaches DETR's transformer
    but not the backbone's attention, so a padded batch would predict otherwise.
    """

    def __init__(self, backbone, bbox_head, neck=None, feat_index=-1, data_preprocessor=None,
                 train_cfg=None, test_cfg=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = MODELS.build(backbone)
        self.neck = MODELS.build(neck) if neck is not None else None
        channels = (self.neck or self.backbone).out_channels
        self.feat_index = feat_index
        bbox_head = dict(bbox_head)
        bbox_head.setdefault('in_channels', self.head_in_channels(channels))
        self.bbox_head = MODELS.build(bbox_head)

    def head_in_channels(self, channels):
        """The head's ``in_channels`` given the backbone / neck ``out_channels``."""
        return channels[self.feat_index]

    def extract_feat(self, inputs):
        """inputs [B, 3, H, W] -> the feature map the head reads [B, C, h, w]."""
        feats = self.backbone(inputs)
        if self.neck is not None:
            feats = self.neck(feats)
        return feats[self.feat_index]

    @staticmethod
    def padding_mask(inputs, feat, data_samples):
        """[B, h, w] bool, True where the feature map covers batch padding.

        Each image occupies the top-left ``img_shape`` of the padded batch; the pixel mask
        is resized to the feature grid by nearest neighbour, as in DETR.
        """
        return DETR.feature_mask(DETR.pixel_mask(inputs, data_samples), feat)

    @staticmethod
    def feature_mask(pixel_mask, feat):
        """pixel_mask [B, H, W] bool -> the mask the head reads: [B, h, w] on the grid of
        ``feat`` (nearest neighbour); also used by the exported graph (``densevit/deploy``)."""
        return F.interpolate(pixel_mask[None].float(), size=feat.shape[-2:])[0].bool()

    @staticmethod
    def pixel_mask(inputs, data_samples):
        """[B, H, W] bool at input resolution, True outside each image's ``img_shape``."""
        B, _, H, W = inputs.shape
        mask = torch.zeros(B, H, W, dtype=torch.bool, device=inputs.device)
        if data_samples is not None:
            mask[:] = True
            for m, ds in zip(mask, data_samples, strict=True):
                h, w = ds.metainfo.get('img_shape', (H, W))[:2]
                m[:h, :w] = False
        return mask

    def postprocess(self, logits, boxes, data_samples):
        """The last decoder layer's logits [B, Q, C] and boxes [B, Q, 4] (normalised cxcywh)
        -> ``data_samples`` with ``pred_instances`` (the head's ``postprocess`` per image);
        shared by ``predict`` and the ONNX Runtime model (``densevit/deploy/onnx_model.py``)."""
        for lg, bx, ds in zip(logits, boxes, data_samples, strict=True):
            ds.pred_instances = self.bbox_head.postprocess(lg, bx, ds.metainfo)
        return data_samples

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples with ``pred_instances``;
        'tensor' -> the head's raw outputs (``data_samples`` may be None: no padding)."""
        feat = self.extract_feat(inputs)
        mask = self.padding_mask(inputs, feat, data_samples)
        if mode == 'loss':
            return self.bbox_head.loss(feat, mask, data_samples)
        if mode == 'predict':
            out = self.bbox_head(feat, mask, data_samples)
            return self.postprocess(out['pred_logits'][-1], out['pred_boxes'][-1], data_samples)
        if mode == 'tensor':
            return self.bbox_head(feat, mask, data_samples)
        raise ValueError(f"DETR.forward: mode must be 'loss', 'predict' or 'tensor', got {mode!r}")
