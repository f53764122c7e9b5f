"""Mask2Former (Cheng et al., CVPR 2022, "Masked-attention Mask Transformer for Universal Image
Segmentation"): a backbone, a pixel decoder and a transformer decoder with masked attention,
one model for semantic, panoptic and instance segmentation."""
from mmengine.model import BaseModel

from densevit.models.size_groups import SizeGroupedPredict
from densevit.registry import MODELS
from densevit.utils.random_draws import UniformDraws

from .mask_classifier import MaskClassifierPredict


def check_levels(source, pixel_decoder):
    """Refuse, naming both, a pixel decoder that reads more maps than ``source`` (the backbone
    or its neck) gives; fill in its ``in_channels`` from ``source.out_channels`` when left
    out. Returns the pixel decoder's config."""
    cfg = dict(pixel_decoder)
    name, levels = type(source).__name__, list(source.out_channels)
    num_levels = cfg.get('num_levels', 3)
    if num_levels > len(levels):
        raise ValueError(f"Mask2Former: the pixel decoder {cfg.get('type')} asks for "
                         f'num_levels={num_levels} maps, but the {name} gives {len(levels)} '
                         f'(out_channels={levels})')
    cfg.setdefault('in_channels', levels)
    if list(cfg['in_channels']) != levels:
        raise ValueError(f"Mask2Former: pixel_decoder.in_channels={list(cfg['in_channels'])} "
                         f'but the {name} gives maps of {levels} channels')
    return cfg


@MODELS.register_module()
class Mask2Former(MaskClassifierPredict, SizeGroupedPredict, BaseModel):
    """Masked-attention Mask Transformer.

    The backbone's maps (through an optional neck, e.g. ``SimpleFeaturePyramid`` on a plain
    ViT; strides 4, 8, 16, 32) go to the pixel decoder
    (:class:`~densevit.models.heads.pixel_decoder.MSDeformAttnPixelDecoder`): a deformable
    encoder over the three coarsest gives the multi-scale memory, an FPN step to stride 4 the
    per-pixel embedding. The transformer decoder
    (:class:`~densevit.models.heads.mask2former_head.Mask2FormerHead`, ``decode_head``) refines
    Q learned queries over the memory, a level per layer, each query's cross-attention masked
    to the foreground of its previous mask, and predicts class logits [B, Q, K+1] and mask
    logits [B, Q, H/4, W/4] before the first layer and after each one. Every prediction set
    gets the mask-classification loss (deep supervision, one
    :class:`~densevit.models.losses.mask_criterion.MaskSetCriterion`, as EoMT); inference
    post-processes the last (:class:`~.mask_classifier.MaskClassifierPredict`, shared with
    EoMT). Masked attention is part of the model: it runs at inference too, and has no random
    draw.

    Args:
        backbone (dict): any backbone with ``out_channels`` (e.g. ``SwinTransformer``,
            ``ResNet``; a ``VisionTransformer`` through a neck).
        pixel_decoder (dict): ``MSDeformAttnPixelDecoder``; ``in_channels`` is filled in from
            the backbone's (or neck's) ``out_channels``. Refused when built if it asks for more
            levels (``num_levels``) than those give.
        decode_head (dict): ``Mask2FormerHead`` with ``num_classes``; ``in_channels`` and
            ``mask_channels`` are filled in from the pixel decoder's ``feat_channels`` and
            ``out_channels``, ``num_levels`` from its ``num_levels``.
        neck (dict, optional): between backbone and pixel decoder.
        num_things_classes (int, optional): panoptic / instance data: the classes below it are
            things, the others stuff (targets and outputs as EoMT's).
        ignore_index (int): label of unlabelled pixels in ``gt_sem_seg``.
        train_cfg (dict, optional): unused.
        test_cfg (dict): as EoMT's less ``masked_attention``: ``mode``, ``semantic_on``,
            ``panoptic_on``, ``instance_on``, ``object_threshold``, ``overlap_threshold``,
            ``max_per_image`` (:class:`~.mask_classifier.MaskClassifierPredict`).
        data_preprocessor (dict): usually ``SegDataPreprocessor``.

    Attributes:
        draws: the source of the loss's random points
            (:class:`~densevit.utils.random_draws.UniformDraws`); a test may give its own.

    Outputs:
        ``mode='loss'``: ``loss_cls``, ``loss_mask``, ``loss_dice`` of the last prediction set,
        ``d{i}.loss_*`` of the others (i = 0: before the first decoder layer, i: after layer
        i). ``mode='predict'``: as EoMT's (``seg_logits``, ``pred_sem_seg``,
        ``pred_panoptic_seg``, ``pred_instances``, at each image's ``ori_shape``).
        ``mode='tensor'``: dict of ``mask_logits`` and ``class_logits``, tuples of the
        ``num_layers`` + 1 prediction sets, the last one final.
    """

    def __init__(self, backbone, pixel_decoder, decode_head, neck=None, num_things_classes=None,
                 ignore_index=255, train_cfg=None, test_cfg=None, data_preprocessor=None,
                 init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = MODELS.build(backbone)
        self.neck = MODELS.build(neck) if neck is not None else None
        source = self.neck if self.neck is not None else self.backbone
        self.pixel_decoder = MODELS.build(check_levels(source, pixel_decoder))
        head = dict(decode_head)
        filled = dict(in_channels=self.pixel_decoder.feat_channels,
                      mask_channels=self.pixel_decoder.out_channels,
                      num_levels=self.pixel_decoder.num_levels)
        for key, value in filled.items():
            head.setdefault(key, value)
            if head[key] != value:
                raise ValueError(f'Mask2Former: decode_head.{key}={head[key]} but the pixel '
                                 f'decoder gives {value}')
        self.decode_head = MODELS.build(head)
        self.num_classes = self.decode_head.num_classes
        self.num_things_classes = num_things_classes
        self.ignore_index = ignore_index
        self.draws = UniformDraws()
        self.train_cfg = train_cfg
        self.test_cfg = {**self.TEST_CFG, **(test_cfg or {})}
        self._check_test_cfg()

    def extract_feat(self, inputs):
        """inputs [B, C, H, W] -> the backbone's (or neck's) maps, finest first."""
        maps = self.backbone(inputs)
        return self.neck(maps) if self.neck is not None else maps

    def prediction_sets(self, inputs):
        """inputs [B, C, H, W] -> (mask logits, class logits): tuples of [B, Q, h, w] and
        [B, Q, K+1], one per prediction set, the final one last."""
        mask_features, memory = self.pixel_decoder(self.extract_feat(inputs))
        return self.decode_head(memory, mask_features)

    def loss(self, inputs, data_samples):
        """The mask-classification loss of every prediction set (deep supervision)."""
        masks, classes = self.prediction_sets(inputs)
        return self.set_losses(masks, classes, inputs, data_samples, prefix='d')
