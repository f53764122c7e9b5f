"""What mask classifiers (EoMT, Mask2Former) share: the loss of every prediction set (deep
supervision with one criterion), ``test_cfg``, and the semantic / panoptic / instance outputs
of the final prediction set (Q class logits and Q mask logits) at each image's original size,
whole-image or by sliding windows."""
import torch
import torch.nn.functional as F
from mmengine.structures import InstanceData, PixelData

from densevit.models.heads.decode_head import class_argmax
from densevit.models.losses.set_criterion import num_boxes_across_ranks
from densevit.structures import DataSample
from densevit.utils.precision import run_in_fp32

from .encoder_decoder import restore_to_original
from .mask_postprocess import instance_segmentation, panoptic_segmentation, semantic_scores
from .mask_targets import mask_targets
from .sliding_window import slide_logits

TEST_CFG = dict(mode='whole', semantic_on=True, panoptic_on=False, instance_on=False,
                object_threshold=0.8, overlap_threshold=0.8, max_per_image=100)
SLIDE_KEYS = ('batch_windows', 'crop_size', 'stride')


def batch_semantic_scores(masks, classes, size):
    """masks [B, Q, h, w] resized bilinearly to ``size``, classes [B, Q, K+1] -> per-class
    scores [B, K, H, W] (:func:`~.mask_postprocess.semantic_scores`)."""
    masks = F.interpolate(masks, size=size, mode='bilinear', align_corners=False)
    return torch.stack([semantic_scores(m, c) for m, c in zip(masks, classes, strict=True)])


class MaskClassifierPredict:
    """``predict``, ``postprocess`` and the deep-supervision loss of a mask classifier (a
    mixin before ``BaseModel``).

    The model provides ``prediction_sets(inputs [B, C, H, W]) -> (mask logits, class logits)``,
    tuples of [B, Q, h, w] and [B, Q, K+1], one per prediction set, the final one last;
    ``loss(inputs, data_samples)``; ``test_cfg`` (a dict, the defaults of ``TEST_CFG`` filled in,
    checked by :meth:`_check_test_cfg`), ``num_classes`` K, ``num_things_classes`` (None, or
    the number of thing classes, which come first), ``ignore_index``, ``draws`` (the random
    numbers, :class:`~densevit.utils.random_draws.UniformDraws`) and
    ``decode_head.criterion`` (a :class:`~densevit.models.losses.mask_criterion.MaskSetCriterion`).

    ``test_cfg``: ``mode`` ``'whole'`` or ``'slide'`` (with ``crop_size``, ``stride``,
    ``batch_windows``: semantic only, window scores averaged); which outputs: ``semantic_on``
    (True), ``panoptic_on``, ``instance_on`` (False; need ``num_things_classes``, and
    ``'whole'``); ``object_threshold``, ``overlap_threshold`` (0.8, 0.8: panoptic),
    ``max_per_image`` (100: instance).

    Outputs, at each image's ``ori_shape``: ``seg_logits`` [K, H, W] (the per-class scores of
    :func:`~.mask_postprocess.semantic_scores`, not logits) and ``pred_sem_seg`` [1, H, W];
    ``pred_panoptic_seg.sem_seg`` [1, H, W] (``label + instance * 1000``, VOID = K);
    ``pred_instances`` (``masks``, ``labels``, ``scores``, ``bboxes``).
    """

    TEST_CFG = TEST_CFG

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples; 'tensor' -> dict of
        ``mask_logits`` and ``class_logits``, the tuples of :meth:`prediction_sets`."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        if mode == 'tensor':
            masks, classes = self.prediction_sets(inputs)
            return dict(mask_logits=masks, class_logits=classes)
        raise ValueError(f"{type(self).__name__}.forward: mode must be 'loss', 'predict' or "
                         f"'tensor', got {mode!r}")

    def final_prediction(self, inputs):
        """The last prediction set (mask logits [B, Q, h, w], class logits [B, Q, K+1]): what
        ``predict`` post-processes."""
        masks, classes = self.prediction_sets(inputs)
        return masks[-1], classes[-1]

    def set_losses(self, masks, classes, inputs, data_samples, prefix):
        """The criterion's losses of every prediction set, against targets from
        ``gt_panoptic_seg``, ``gt_instances`` or ``gt_sem_seg`` (:func:`~.mask_targets.mask_targets`).

        Args:
            masks, classes (Sequence[Tensor]): the prediction sets in order, [B, Q, h, w] and
                [B, Q, K+1] each, the final one last.
            inputs: the batch [B, C, H, W] (the targets are made at its size).
            prefix (str): the intermediate sets' keys are ``{prefix}{i}.loss_*``; the final
                set's ``loss_cls``, ``loss_mask``, ``loss_dice``.
        """
        targets = mask_targets(data_samples, inputs.shape[-2:], inputs.device, self.num_classes,
                               self.ignore_index, self.num_things_classes)
        num_masks = num_boxes_across_ranks(targets, inputs.device)
        criterion = self.decode_head.criterion
        losses = {}
        for i, (mask_logits, class_logits) in enumerate(zip(masks, classes, strict=True)):
            tag = '' if i == len(masks) - 1 else f'{prefix}{i}.'
            out = criterion(mask_logits, class_logits, targets, num_masks, self.draws)
            losses.update({tag + k: v for k, v in out.items()})
        return losses

    def _check_test_cfg(self):
        name, cfg = type(self).__name__, self.test_cfg
        unknown = sorted(set(cfg) - set(self.TEST_CFG) - set(SLIDE_KEYS))
        if unknown:
            raise ValueError(f'{name}: unknown test_cfg key(s) {unknown}; known: '
                             f'{sorted(self.TEST_CFG) + list(SLIDE_KEYS)}')
        if cfg['mode'] not in ('whole', 'slide'):
            raise ValueError(f"{name}: test_cfg.mode must be 'whole' or 'slide', got "
                             f"{cfg['mode']!r}")
        wanted = [k for k in ('panoptic_on', 'instance_on') if cfg[k]]
        if wanted and self.num_things_classes is None:
            raise ValueError(f'{name}: test_cfg.{wanted[0]} needs num_things_classes (the thing '
                             f'classes come first)')
        if cfg['mode'] == 'slide':
            missing = [k for k in ('crop_size', 'stride') if k not in cfg]
            if missing:
                raise ValueError(f'{name}: slide inference needs test_cfg.{missing[0]} (h, w)')
            if wanted or not cfg['semantic_on']:
                raise ValueError(f"{name}: slide inference gives semantic segmentation only "
                                 f"(test_cfg.semantic_on); panoptic / instance need mode='whole'")

    def predict(self, inputs, data_samples=None):
        """The outputs ``test_cfg`` asks for, per image at its ``ori_shape`` (the batch
        padding cut, a flip undone, resized bilinearly); see the class docstring."""
        if data_samples is None:
            shape = tuple(inputs.shape[-2:])
            data_samples = [DataSample(metainfo=dict(img_shape=shape, ori_shape=shape))
                            for _ in range(len(inputs))]
        if self.test_cfg['mode'] == 'slide':
            return self._predict_slide(inputs, data_samples)
        mask_logits, class_logits = self.final_prediction(inputs)
        return self.postprocess(mask_logits, class_logits, data_samples,
                                tuple(inputs.shape[-2:]))

    def postprocess(self, mask_logits, class_logits, data_samples, size):
        """The final prediction set -- mask logits [B, Q, h, w], class logits [B, Q, K+1],
        from PyTorch or an exported graph -- into each data sample's outputs; ``size`` is the
        padded input's (H, W). Resized and post-processed in float32 at least, autocast off
        (bf16 inference). Returns ``data_samples``."""
        run_in_fp32(self._postprocess_batch, mask_logits, class_logits, data_samples, size)
        return data_samples

    def _postprocess_batch(self, masks, classes, data_samples, size):
        """masks [B, Q, h, w] (resized to the padded input's ``size``), classes [B, Q, K+1]
        -> each data sample's outputs."""
        masks = F.interpolate(masks, size=size, mode='bilinear', align_corners=False)
        for ds, mask_logits, class_logits in zip(data_samples, masks, classes, strict=True):
            self._postprocess(ds, restore_to_original(mask_logits, ds.metainfo), class_logits)

    def _postprocess(self, ds, mask_logits, class_logits):
        """One image's outputs from its mask logits [Q, H, W] (original size) and class
        logits [Q, K+1]."""
        cfg = self.test_cfg
        if cfg['semantic_on']:
            self._set_semantic(ds, semantic_scores(mask_logits, class_logits))
        if cfg['panoptic_on']:
            ids = panoptic_segmentation(mask_logits, class_logits, self.num_things_classes,
                                        cfg['object_threshold'], cfg['overlap_threshold'])
            ds.pred_panoptic_seg = PixelData(sem_seg=ids[None])
        if cfg['instance_on']:
            ds.pred_instances = InstanceData(**instance_segmentation(
                mask_logits, class_logits, cfg['max_per_image'], self.num_things_classes))

    @staticmethod
    def _set_semantic(ds, scores):
        ds.seg_logits = PixelData(data=scores)
        ds.pred_sem_seg = PixelData(data=class_argmax(scores, 0)[None])

    def _predict_slide(self, inputs, data_samples):
        """Semantic scores of overlapping windows, averaged per pixel."""
        def window_scores(crops):
            masks, classes = self.final_prediction(crops)
            return run_in_fp32(batch_semantic_scores, masks, classes, tuple(crops.shape[-2:]))
        cfg = self.test_cfg
        scores = slide_logits(window_scores, inputs, tuple(cfg['crop_size']),
                              tuple(cfg['stride']), cfg.get('batch_windows', 1))
        for ds, s in zip(data_samples, scores, strict=True):
            self._set_semantic(ds, restore_to_original(s, ds.metainfo))
        return data_samples
