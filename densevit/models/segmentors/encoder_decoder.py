"""Encoder-decoder segmentor: backbone -> [neck] -> decode head (+ auxiliary heads)."""
import torch.nn.functional as F
from mmengine.model import BaseModel
from mmengine.structures import PixelData
from torch import nn

from densevit.models.heads.decode_head import class_argmax
from densevit.models.segmentors.sliding_window import slide_logits
from densevit.models.size_groups import SizeGroupedPredict
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.precision import at_least_fp32


def _prefixed(losses, prefix):
    return {f'{prefix}.{k}': v for k, v in losses.items()}


def restore_to_original(maps, meta, align_corners=False):
    """[C, H, W] maps of the padded input -> [C, h0, w0] of the original image: the padding
    cut off (``img_shape``), a recorded flip (``flip``, ``flip_direction``) undone, resized
    bilinearly to ``ori_shape``."""
    h, w = meta.get('img_shape', maps.shape[-2:])[:2]
    maps = maps[:, :h, :w]
    if meta.get('flip', False):
        direction = meta.get('flip_direction', 'horizontal')
        dims = dict(horizontal=[2], vertical=[1], diagonal=[1, 2]).get(direction)
        if dims is None:
            raise ValueError(f'unknown flip_direction {direction!r}')
        maps = maps.flip(dims)
    ori = tuple(meta.get('ori_shape', (h, w))[:2])
    if ori != (h, w):
        maps = F.interpolate(maps[None], size=ori, mode='bilinear',
                             align_corners=align_corners)[0]
    return maps


@MODELS.register_module()
class EncoderDecoder(SizeGroupedPredict, BaseModel):
    """Semantic segmentation with one decode head and optional auxiliary heads.

    Args:
        backbone, decode_head (dict): configs; heads take ``in_channels`` / ``in_index``
            / ``num_classes`` from their own config (the contract of ``DecodeHead`` in
            ``densevit/models/heads/decode_head.py``).
        neck (dict, optional): e.g. an MLA neck between a plain ViT and the head.
        auxiliary_head (dict | list[dict], optional): extra heads trained alongside
            (deep supervision, as in SETR); unused at inference. Always held in a
            ``ModuleList``, so their losses are ``aux_0.*``, ``aux_1.*``... even for a
            single head (mmseg calls a single one ``aux.``).
        train_cfg (dict, optional): unused; kept for config compatibility.
        test_cfg (dict): ``dict(mode='whole')`` runs the full image once;
            ``dict(mode='slide', crop_size=(h, w), stride=(h, w), batch_windows=1)``
            averages overlapping windows (see ``sliding_window.py``).
        data_preprocessor (dict): usually ``SegDataPreprocessor``.

    Loss keys: ``decode.<key>`` from the decode head, ``aux_<i>.<key>`` from auxiliary
    head ``i`` (mmengine sums those containing ``loss``; ``acc_seg`` is only logged).

    ``val_step`` / ``test_step`` predict each group of same-size images of a batch on its
    own (``densevit/models/size_groups.py``), so the test batch size changes nothing.
    """

    def __init__(self, backbone, decode_head, neck=None, auxiliary_head=None, train_cfg=None,
                 test_cfg=None, data_preprocessor=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = MODELS.build(backbone)
        self.neck = MODELS.build(neck) if neck is not None else None
        self.decode_head = MODELS.build(decode_head)
        self.align_corners = getattr(self.decode_head, 'align_corners', False)
        if isinstance(auxiliary_head, dict):
            auxiliary_head = [auxiliary_head]
        self.auxiliary_head = (nn.ModuleList(MODELS.build(h) for h in auxiliary_head)
                               if auxiliary_head else None)
        self.train_cfg = train_cfg
        self.test_cfg = dict(test_cfg or dict(mode='whole'))
        mode = self.test_cfg.setdefault('mode', 'whole')
        if mode not in ('whole', 'slide'):
            raise ValueError(f"test_cfg.mode must be 'whole' or 'slide', got {mode!r}")
        if mode == 'slide':
            missing = [k for k in ('crop_size', 'stride') if k not in self.test_cfg]
            if missing:
                raise ValueError(f'slide inference needs test_cfg.{missing[0]} (h, w)')

    def extract_feat(self, inputs):
        """[B, 3, H, W] -> tuple of NCHW maps (backbone, then neck)."""
        feats = self.backbone(inputs)
        if self.neck is not None:
            feats = self.neck(feats)
        return feats

    def encode_decode(self, inputs, batch_img_metas=None):
        """[B, 3, H, W] -> [B, K, H, W] logits, resized bilinearly to the input size."""
        logits = self.decode_head.predict(self.extract_feat(inputs), batch_img_metas,
                                          self.test_cfg)
        logits = at_least_fp32(logits)  # resized and argmaxed in float32 under bf16 autocast
        return F.interpolate(logits, size=inputs.shape[-2:], mode='bilinear',
                             align_corners=self.align_corners)

    def loss(self, inputs, data_samples):
        """Labels are ``data_samples[i].gt_sem_seg`` padded to the batch size (255 = ignore)."""
        feats = self.extract_feat(inputs)
        losses = _prefixed(self.decode_head.loss(feats, data_samples), 'decode')
        for i, head in enumerate(self.auxiliary_head or ()):
            losses.update(_prefixed(head.loss(feats, data_samples), f'aux_{i}'))
        return losses

    def inference(self, inputs, batch_img_metas):
        """[B, 3, H, W] -> [B, K, H, W] logits over the padded batch (whole or slide)."""
        if self.test_cfg['mode'] == 'whole':
            return self.encode_decode(inputs, batch_img_metas)
        # a window's crops carry no padding of their own: metas of the window size
        def window_logits(crops):
            metas = [dict(img_shape=tuple(crops.shape[-2:]),
                          batch_input_shape=tuple(crops.shape[-2:]))] * len(crops)
            return self.encode_decode(crops, metas)
        return slide_logits(window_logits, inputs, tuple(self.test_cfg['crop_size']),
                            tuple(self.test_cfg['stride']),
                            self.test_cfg.get('batch_windows', 1), self.align_corners)

    def predict(self, inputs, data_samples=None):
        """Predict ``pred_sem_seg`` [1, H, W] and ``seg_logits`` [K, H, W] at ``ori_shape``.

        Per image: the batch padding is cut off (``img_shape``), a flip recorded in
        the metainfo (``flip``, ``flip_direction``) is undone, the logits are resized
        bilinearly to ``ori_shape`` and the class is their argmax. Without
        ``data_samples`` the input is taken as unpadded and unresized.
        """
        if data_samples is None:
            shape = tuple(inputs.shape[-2:])
            data_samples = [DataSample(metainfo=dict(img_shape=shape, ori_shape=shape))
                            for _ in range(len(inputs))]
        logits = self.inference(inputs, [ds.metainfo for ds in data_samples])
        return self.postprocess(logits, data_samples)

    def postprocess(self, logits, data_samples):
        """[B, K, H, W] logits of the padded batch -> ``data_samples`` with ``seg_logits``
        [K, h0, w0] and ``pred_sem_seg`` [1, h0, w0] (see :meth:`predict`); shared by
        :meth:`predict` and the ONNX Runtime model (``densevit/deploy/onnx_model.py``).
        Without ``data_samples`` the logits are taken as unpadded and unresized."""
        if data_samples is None:
            shape = tuple(logits.shape[-2:])
            data_samples = [DataSample(metainfo=dict(img_shape=shape, ori_shape=shape))
                            for _ in range(len(logits))]
        for ds, seg in zip(data_samples, logits, strict=True):
            seg = self.restore(seg, ds.metainfo)
            ds.seg_logits = PixelData(data=seg)
            ds.pred_sem_seg = PixelData(data=class_argmax(seg, 0)[None])
        return data_samples

    def restore(self, logits, meta):
        """[K, H, W] logits of the padded input -> [K, h0, w0] of the original image."""
        return restore_to_original(logits, meta, self.align_corners)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples with
        ``pred_sem_seg`` / ``seg_logits``; 'tensor' -> the decode head's raw logits
        [B, K, h, w] (at the head's resolution, for export and benchmarks)."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        if mode == 'tensor':
            return self.decode_head(self.extract_feat(inputs))
        raise ValueError(f"EncoderDecoder.forward: mode must be 'loss', 'predict' or 'tensor', "
                         f'got {mode!r}')
