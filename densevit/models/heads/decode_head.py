"""``DecodeHead``: what every semantic-segmentation head shares.

A head reads one or several backbone/neck maps and predicts per-pixel class
logits at its own (reduced) resolution. The shared part is: picking its
inputs (``in_index``), the classifier (dropout + 1x1 conv ``conv_seg``), the
loss against the label maps, and prediction. A subclass writes ``forward``
only (and builds its layers in ``__init__``).
"""
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmengine.model import BaseModule
from torch import nn

from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default


def class_argmax(logits, dim):
    """Index of the largest logit along ``dim`` (the first on ties, as ``argmax``).

    ``Tensor.max(dim)`` rather than ``argmax(dim)``: on CPU, torch's argmax over a
    dimension that is not the innermost is several times slower for class maps
    ([B, K, H, W] along K).
    """
    return logits.max(dim=dim).indices


@torch.no_grad()
def pixel_accuracy(seg_logits, label, ignore_index=255):
    """Percentage of non-ignored pixels whose argmax class equals the label.

    Args:
        seg_logits: [B, K, H, W]; label: [B, H, W] long.

    Returns:
        0-dim tensor in [0, 100]; 0 when every pixel is ignored (a NaN would
        poison the averaged training log).
    """
    valid = label != ignore_index
    correct = (class_argmax(seg_logits, 1) == label) & valid
    return correct.sum().float() * 100.0 / valid.sum().clamp(min=1)


def resize(x, size, mode='bilinear', align_corners=False):
    """Interpolate NCHW ``x`` to ``size`` = (h, w); a no-op when already there (not while
    ``torch.export`` traces: comparing symbolic sizes would fix the graph to one size)."""
    if not torch.compiler.is_exporting() and tuple(x.shape[-2:]) == tuple(size):
        return x
    if mode in ('nearest', 'area'):  # these modes take no align_corners
        return F.interpolate(x, size=size, mode=mode)
    return F.interpolate(x, size=size, mode=mode, align_corners=align_corners)


class DecodeHead(BaseModule):
    """Base of the segmentation heads (not registered itself).

    Args:
        in_channels (int | Sequence[int]): channels of the selected input(s);
            a sequence exactly when ``in_index`` is one.
        channels (int): width of the head's last feature map (classifier input).
        num_classes (int): K.
        in_index (int | Sequence[int]): which maps of the input tuple to read.
        dropout_ratio (float): ``Dropout2d`` before the classifier (whole
            channels dropped, which is what helps on spatially correlated maps).
        norm_cfg (dict | None): norm of the head's ConvModules (default
            ``dict(type='BN')``; ``SyncBN`` for multi-process training; None: no norm).
        act_cfg (dict | None): activation of the head's ConvModules (default
            ``dict(type='ReLU')``; None: no activation).
        align_corners (bool): for every bilinear resize in the head and loss.
        ignore_index (int): label value excluded from loss and accuracy.
        loss_decode (dict | Sequence[dict]): loss config(s) from ``MODELS``;
            losses that share a ``loss_name`` are summed. Default
            ``dict(type='CrossEntropyLoss', loss_weight=1.0)``.
        init_cfg (dict | list, optional): default: ``conv_seg`` ~ N(0, 0.01),
            so the initial prediction is near-uniform.

    Shapes:
        forward(inputs: tuple of [B, C_i, H_i, W_i]) -> [B, K, h, w].
    """

    # test-time augmentation merges this head's per-view logits (densevit/models/tta)
    tta_merge = 'seg_logits'

    def __init__(self, in_channels, channels, num_classes, in_index=-1, dropout_ratio=0.1,
                 norm_cfg=DEFAULT, act_cfg=DEFAULT, align_corners=False, ignore_index=255,
                 loss_decode=DEFAULT, init_cfg=None):
        norm_cfg = resolve_default(norm_cfg, dict(type='BN'))
        act_cfg = resolve_default(act_cfg, dict(type='ReLU'))
        loss_decode = resolve_default(loss_decode, dict(type='CrossEntropyLoss', loss_weight=1.0))
        if init_cfg is None:
            init_cfg = dict(type='Normal', std=0.01, override=dict(name='conv_seg'))
        super().__init__(init_cfg=init_cfg)
        multi = isinstance(in_index, Sequence)
        if multi != isinstance(in_channels, Sequence) or (
                multi and len(in_index) != len(in_channels)):
            raise ValueError(f'{type(self).__name__}: in_channels {in_channels!r} must match '
                             f'in_index {in_index!r} (an int for one input, or a sequence '
                             f'of the same length)')
        self.in_channels = list(in_channels) if multi else in_channels
        self.in_index = list(in_index) if multi else in_index
        self.channels = channels
        self.num_classes = num_classes
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.align_corners = align_corners
        self.ignore_index = ignore_index

        if isinstance(loss_decode, dict):
            loss_decode = [loss_decode]
        self.loss_decode = nn.ModuleList(MODELS.build(cfg) for cfg in loss_decode)

        self.dropout = nn.Dropout2d(dropout_ratio) if dropout_ratio > 0 else nn.Identity()
        self.conv_seg = nn.Conv2d(channels, num_classes, kernel_size=1)

    def _select_inputs(self, inputs):
        """The map (int ``in_index``) or list of maps (sequence) this head reads."""
        if isinstance(self.in_index, list):
            return [inputs[i] for i in self.in_index]
        return inputs[self.in_index]

    def conv_module(self, in_channels, out_channels, kernel_size, **kwargs):
        """A ``ConvModule`` (conv, then this head's ``norm_cfg`` and ``act_cfg``); ``padding``,
        ``dilation`` ... in ``kwargs``."""
        return ConvModule(in_channels, out_channels, kernel_size, norm_cfg=self.norm_cfg,
                          act_cfg=self.act_cfg, **kwargs)

    def cls_seg(self, feat):
        """[B, channels, h, w] -> logits [B, K, h, w]."""
        return self.conv_seg(self.dropout(feat))

    def forward(self, inputs):
        raise NotImplementedError

    def loss(self, inputs, data_samples):
        """Forward and losses against ``data_samples[i].gt_sem_seg.data`` ([1, H, W]).

        The label maps must share one size (the data preprocessor pads them
        with ``ignore_index`` to the batch input size); the logits are
        resized bilinearly to it before the loss.

        Returns:
            dict with one entry per loss name (e.g. ``loss_ce``) and ``acc_seg``.
        """
        return self.loss_by_feat(self.forward(inputs), data_samples)

    def loss_by_feat(self, seg_logits, data_samples):
        shapes = {tuple(ds.gt_sem_seg.data.shape[-2:]) for ds in data_samples}
        if len(shapes) != 1:
            raise ValueError(f'{type(self).__name__}.loss: label maps of different sizes '
                             f'{sorted(shapes)}; pad them to the batch input size '
                             f'(SegDataPreprocessor does)')
        label = torch.stack([ds.gt_sem_seg.data for ds in data_samples])  # [B, 1, H, W]
        label = label.squeeze(1).long().to(seg_logits.device)
        seg_logits = resize(seg_logits, label.shape[-2:], align_corners=self.align_corners)

        losses = {}
        for loss_fn in self.loss_decode:
            value = loss_fn(seg_logits, label, ignore_index=self.ignore_index)
            name = loss_fn.loss_name
            losses[name] = losses[name] + value if name in losses else value
        losses['acc_seg'] = pixel_accuracy(seg_logits, label, self.ignore_index)
        return losses

    def predict(self, inputs, batch_img_metas, test_cfg=None):
        """Raw logits [B, K, h, w] at the head's resolution; the segmentor
        strips padding and resizes them to each original image."""
        return self.forward(inputs)
