"""DETR for panoptic segmentation (Carion et al. 2020, Sec. 4.4): a DETR detector trained on
the boxes of every segment (things and stuff), with an optional mask head on its queries."""
import contextlib
import inspect

import torch
from mmengine.structures import InstanceData, PixelData

from densevit.checkpoint.match import CheckpointMismatchError, describe_module
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.structures.panoptic import INSTANCE_OFFSET
from densevit.utils.precision import at_least_fp32

from ..losses.dense_mask_loss import upsampled_masks
from ..losses.set_criterion import matched_queries, num_boxes_across_ranks
from ..segmentors.encoder_decoder import restore_to_original
from ..segmentors.mask_postprocess import mask_boxes, panoptic_from_scores
from ..segmentors.mask_targets import class_masks
from .detr import DETR
from .detr_panoptic_postprocess import detr_panoptic_segmentation, query_classes

_RULES = ('detr', 'transformers')
_TEST_DEFAULTS = dict(rule='detr', object_threshold=0.85, min_area=5, overlap_threshold=0.8)


def supports_mask_head(head):
    """Whether a box head's forward gives what the mask head reads (``with_mask_inputs``)."""
    return 'with_mask_inputs' in inspect.signature(type(head).forward).parameters


@MODELS.register_module()
class DETRPanoptic(DETR):
    """DETR on panoptic segments, with DETR's mask head (``DETRMaskHead``) or without.

    Training targets are the segments of ``gt_panoptic_seg`` (every thing instance and every
    stuff class present; VOID and thing crowd regions left out), each a class, the box around
    its mask and the mask. Without ``mask_head`` it is the paper's first stage (boxes and
    classes of things *and* stuff); with it the matched queries' masks are trained too
    (``loss_mask``: sigmoid focal, ``loss_dice``), the matching unchanged (boxes and classes,
    the last decoder layer's). With ``freeze_detector`` (the paper's second stage) only the
    mask head trains and the detector runs in eval mode without gradients; its weights come
    from the first stage's checkpoint (``load_from``, refused when it does not hold the whole
    detector).

    Args:
        backbone, neck, bbox_head, feat_index, data_preprocessor: as :class:`DETR`;
            ``bbox_head`` must be one whose forward takes ``with_mask_inputs`` (``DETRHead``,
            ``PlainDETRHead``) when there is a mask head.
        mask_head (dict | None): a ``DETRMaskHead`` config; ``embed_dims`` defaults to
            ``bbox_head.embed_dims`` (256), ``fpn_channels`` to the channels of the maps of
            ``fpn_indices``.
        fpn_indices (Sequence[int]): the outputs of the backbone (or, with ``fpn_from_neck``,
            the neck) that the mask head's decoder fuses, coarsest first: a ResNet with
            ``out_indices=(0, 1, 2, 3)`` read at -1 gives (2, 1, 0), strides 16, 8, 4 (DETR's);
            () for a plain ViT's single map (masks at its stride).
        fpn_from_neck (bool): take those maps from the neck's outputs.
        num_things_classes (int | None): classes below it are things (COCO panoptic: 80);
            None: every class is a thing. Stuff segments of one class are merged at inference;
            only things go to ``pred_instances``.
        freeze_detector (bool): train the mask head alone (backbone, neck and box head frozen).
        test_cfg (dict): ``rule`` ``'detr'`` (DETR's, :mod:`.detr_panoptic_postprocess`, the
            default) or ``'transformers'`` (Hugging Face's ``post_process_panoptic_segmentation``,
            :func:`~densevit.models.segmentors.mask_postprocess.panoptic_from_scores`);
            ``object_threshold`` (0.85), ``min_area`` (5, DETR's rule), ``overlap_threshold``
            (0.8, transformers').

    Outputs of ``predict``, at each image's ``ori_shape``: ``pred_instances`` (the box head's
    detections of thing classes; with the mask head also ``masks``: the query's mask logit
    > 0) and, with the mask head, ``pred_panoptic_seg.sem_seg`` [1, H, W] (``label + instance
    * 1000``, VOID = K). ``mode='tensor'`` adds ``pred_masks`` [B, Q, h, w] to the head's
    outputs.
    """

    def __init__(self, backbone, bbox_head, neck=None, mask_head=None, fpn_indices=(),
                 fpn_from_neck=False, num_things_classes=None, freeze_detector=False,
                 feat_index=-1, data_preprocessor=None, train_cfg=None, test_cfg=None,
                 init_cfg=None):
        super().__init__(backbone, bbox_head, neck=neck, feat_index=feat_index,
                         data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.num_classes = self.bbox_head.num_classes
        self.num_things_classes = num_things_classes
        self.fpn_indices, self.fpn_from_neck = tuple(fpn_indices), fpn_from_neck
        self.freeze_detector = freeze_detector
        self.test_cfg = self._check_test_cfg(test_cfg)
        self.mask_head = None
        if mask_head is not None:
            if not supports_mask_head(self.bbox_head):
                raise ValueError(f'DETRPanoptic: a mask head needs a box head that gives its '
                                 f'inputs (DETRHead, PlainDETRHead); '
                                 f'{type(self.bbox_head).__name__} does not')
            source = self.neck if fpn_from_neck else self.backbone
            mask_head = dict(mask_head)
            mask_head.setdefault('embed_dims', bbox_head.get('embed_dims', 256))
            mask_head.setdefault('fpn_channels', [source.out_channels[i] for i in fpn_indices])
            self.mask_head = MODELS.build(mask_head)
        elif freeze_detector:
            raise ValueError('DETRPanoptic: freeze_detector=True trains the mask head alone, '
                             'but there is no mask_head')
        if freeze_detector:
            for part in (self.backbone, self.neck, self.bbox_head):
                if part is not None:
                    part.requires_grad_(False)

    def train(self, mode=True):
        """mmengine's train / eval switch; a frozen detector stays in eval mode (no dropout,
        no normalisation statistics updated), only the mask head trains."""
        super().train(mode)
        if self.freeze_detector:
            for part in (self.backbone, self.neck, self.bbox_head):
                if part is not None:
                    part.eval()
        return self

    @staticmethod
    def _check_test_cfg(test_cfg):
        cfg = dict(_TEST_DEFAULTS, **(test_cfg or {}))
        unknown = set(cfg) - set(_TEST_DEFAULTS)
        if unknown:
            raise ValueError(f'DETRPanoptic.test_cfg: unknown keys {sorted(unknown)} (known: '
                             f'{sorted(_TEST_DEFAULTS)})')
        if cfg['rule'] not in _RULES:
            raise ValueError(f"DETRPanoptic.test_cfg.rule must be one of {_RULES}, got "
                             f"{cfg['rule']!r}")
        return cfg

    # ------------------------------------------------------------------ features, targets

    def extract_feats(self, inputs):
        """inputs [B, 3, H, W] -> (the map the box head reads [B, C, h, w], the mask head's
        finer maps, coarsest first)."""
        feats = self.backbone(inputs)
        finer = feats
        if self.neck is not None:
            feats = self.neck(feats)
            finer = feats if self.fpn_from_neck else finer
        return feats[self.feat_index], [finer[i] for i in self.fpn_indices]

    def segment_targets(self, data_sample):
        """The segments of ``gt_panoptic_seg`` [1, h, w] as instances: ``labels`` [N],
        ``masks`` [N, h, w] bool, ``bboxes`` [N, 4] xyxy pixels around the masks; in id
        order, VOID and crowd regions of thing classes (instance 0) left out."""
        ids = data_sample.gt_panoptic_seg.data[0]
        labels = ids.unique()
        labels = labels[labels % INSTANCE_OFFSET < self.num_classes]
        values = labels[(labels >= INSTANCE_OFFSET) | (labels >= self.things())]
        masks = class_masks(ids, values)
        return InstanceData(labels=(values % INSTANCE_OFFSET).long(), masks=masks,
                            bboxes=mask_boxes(masks).to(ids.device))

    def things(self):
        """The number of thing classes (all, when ``num_things_classes`` is None)."""
        return self.num_classes if self.num_things_classes is None else self.num_things_classes

    def segment_samples(self, data_samples):
        """DataSamples whose ``gt_instances`` are the panoptic segments (the box head's
        targets); each needs ``gt_panoptic_seg``."""
        samples = []
        for ds in data_samples:
            if 'gt_panoptic_seg' not in ds:
                raise ValueError('DETRPanoptic trains on gt_panoptic_seg (LoadPanopticAnnotations '
                                 f'in the pipeline); a sample of {ds.metainfo.get("img_path")} '
                                 'has none')
            samples.append(DataSample(metainfo=ds.metainfo, gt_instances=self.segment_targets(ds)))
        return samples

    # ------------------------------------------------------------------ training

    def loss(self, inputs, data_samples):
        """The box head's losses on the segments (not with ``freeze_detector``: they cannot
        change) and the mask head's ``loss_mask``, ``loss_dice`` on the last layer's matches."""
        samples = self.segment_samples(data_samples)
        with torch.no_grad() if self.freeze_detector else contextlib.nullcontext():
            feat, finer = self.extract_feats(inputs)
            mask = self.padding_mask(inputs, feat, samples)
            if self.mask_head is None:
                return self.bbox_head.loss(feat, mask, samples)
            out = self.bbox_head(feat, mask, samples, with_mask_inputs=True)
        head = self.bbox_head
        targets = head.get_targets(samples)
        num_boxes = num_boxes_across_ranks(targets, inputs.device)
        losses = {} if self.freeze_detector else head.layer_losses(out, targets, num_boxes)
        with torch.no_grad():
            indices = head.criterion.matcher(
                dict(pred_logits=out['pred_logits'][-1], pred_boxes=out['pred_boxes'][-1]),
                targets)
        # only the matched queries' masks enter the losses: decode those alone
        pred_masks = self.mask_head(**out['mask_inputs'], fpn_feats=finer,
                                    selected=matched_queries(indices))
        losses.update(self.mask_head.loss(pred_masks, [s.gt_instances.masks for s in samples],
                                          indices, num_boxes, tuple(inputs.shape[-2:])))
        return losses

    def check_checkpoint(self, module, state_dict, source, what):
        """With ``freeze_detector``, refuse a checkpoint that does not hold every tensor of the
        detector (``load_from``: the first stage), naming the file's model and this one."""
        if not self.freeze_detector:
            return
        own = {k: v for k, v in module.state_dict().items() if not k.startswith('mask_head.')}
        missing = [k for k in own if k not in state_dict]
        shapes = [k for k in own if k in state_dict and state_dict[k].shape != own[k].shape]
        if missing or shapes:
            raise CheckpointMismatchError(
                f'{source} cannot be the first stage of this model: it is {what}, but the '
                f'config builds {describe_module(module)}, whose frozen detector needs all '
                f'{len(own)} of its tensors from it; {len(missing)} are missing '
                f'{missing[:5]} and {len(shapes)} have other shapes {shapes[:5]}. Set '
                f'load_from to a checkpoint of the first-stage config')

    # ------------------------------------------------------------------ inference

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples with
        ``pred_instances`` (and, with a mask head, ``pred_panoptic_seg``); 'tensor' -> the
        head's raw outputs (+ ``pred_masks`` [B, Q, h, w])."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        if mode not in ('predict', 'tensor'):
            raise ValueError(f"DETRPanoptic.forward: mode must be 'loss', 'predict' or "
                             f"'tensor', got {mode!r}")
        feat, finer = self.extract_feats(inputs)
        mask = self.padding_mask(inputs, feat, data_samples)
        with_masks = self.mask_head is not None
        out = self.bbox_head(feat, mask, data_samples, with_mask_inputs=with_masks)
        if with_masks:
            out['pred_masks'] = self.mask_head(**out.pop('mask_inputs'), fpn_feats=finer)
        if mode == 'tensor':
            return out
        return self.postprocess(out['pred_logits'][-1], out['pred_boxes'][-1], data_samples,
                                out.get('pred_masks'), tuple(inputs.shape[-2:]))

    def postprocess(self, logits, boxes, data_samples, pred_masks=None, size=None):
        """:meth:`DETR.postprocess` (``pred_instances``, things only), then with ``pred_masks``
        [B, Q, h, w] (at the stride of the padded input of ``size`` (H, W)) each thing
        detection's mask and the panoptic map."""
        super().postprocess(logits, boxes, data_samples)
        for b, ds in enumerate(data_samples):
            inst = ds.pred_instances
            if self.num_things_classes is not None:
                inst = inst[inst.labels < self.num_things_classes]
            if pred_masks is not None:
                masks = at_least_fp32(pred_masks[b])
                inst.masks = self._to_original(masks[inst.queries], size, ds.metainfo) > 0
                ds.pred_panoptic_seg = PixelData(
                    sem_seg=self.panoptic(masks, at_least_fp32(logits[b]), size, ds.metainfo)[None])
            ds.pred_instances = inst
        return data_samples

    @staticmethod
    def _to_original(mask_logits, size, meta):
        """[N, h, w] logits at the padded input's stride -> [N, H0, W0] at ``ori_shape``."""
        up = upsampled_masks(mask_logits, size, size)
        if not len(up):
            h, w = meta.get('ori_shape', size)[:2]
            return up.new_zeros((0, h, w))
        return restore_to_original(up, meta)

    def panoptic(self, mask_logits, class_logits, size, meta):
        """One image's panoptic map [H0, W0] from its mask logits [Q, h, w] and class logits."""
        cfg = self.test_cfg
        scores, labels = query_classes(class_logits, self.num_classes)
        # only queries the rule may keep are resized (a few of Q at the original size)
        candidates = torch.nonzero((labels < self.num_classes)
                                   & (scores > cfg['object_threshold']))[:, 0]
        masks = self._to_original(mask_logits[candidates], size, meta)
        scores, labels = scores[candidates], labels[candidates]
        things = self.things()
        if cfg['rule'] == 'detr':
            return detr_panoptic_segmentation(masks, scores, labels, self.num_classes, things,
                                              cfg['object_threshold'], cfg['min_area'])
        return panoptic_from_scores(masks, scores, labels, self.num_classes, things,
                                    cfg['object_threshold'], cfg['overlap_threshold'],
                                    convention='transformers')
