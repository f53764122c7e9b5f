"""DINO self-distillation (Caron et al. 2021, "Emerging Properties in Self-Supervised Vision
Transformers"): a student ViT learns to match, on every crop of an image, what an EMA teacher
says about the image's global crops.

Named ``DINOSelfDistillation`` (configs in ``configs/dino_ssl/``): ``DINO`` in densevit is the
DINO-DETR detector (``configs/dino/``).
"""
import copy
import math

import torch
import torch.nn.functional as F
from mmengine import dist
from mmengine.model import BaseModel
from torch import nn

from densevit.models.backbones.vit import VisionTransformer
from densevit.registry import MODELS
from densevit.structures import DataSample


def cosine_momentum(step, total_steps, base=0.996, final=1.0):
    """DINO's teacher momentum after optimiser step ``step`` (0-based) of ``total_steps``:
    ``final + (base - final) * (1 + cos(pi * step / total_steps)) / 2`` (the official
    ``cosine_scheduler(base, final, ...)`` without warm-up); ``final`` from ``total_steps`` on."""
    if step >= total_steps:
        return float(final)
    return final + 0.5 * (base - final) * (1 + math.cos(math.pi * step / total_steps))


def teacher_temperature(step, start=0.04, end=0.04, warmup_steps=0):
    """The teacher's temperature at optimiser step ``step``: the official schedule, by step
    instead of by epoch: ``linspace(start, end, warmup_steps)`` for the first ``warmup_steps``
    steps (the last of them at ``end``), ``end`` after."""
    if step >= warmup_steps:
        return float(end)
    if warmup_steps == 1:
        return float(start)
    return start + (end - start) * step / (warmup_steps - 1)


def sharpen(teacher_logits, center, temperature):
    """The teacher's targets: ``softmax((logits - center) / temperature)`` over the last axis."""
    return F.softmax((teacher_logits - center) / temperature, dim=-1)


def updated_center(center, teacher_logits, momentum=0.9):
    """``center * momentum + mean of the rows of teacher_logits * (1 - momentum)``: DINO's EMA
    of the teacher's batch means (every global crop of every image is a row); in a
    distributed run the mean is over every process's rows, as the official all-reduce."""
    rows = teacher_logits.reshape(-1, teacher_logits.shape[-1])
    total = rows.sum(0, keepdim=True)
    count = torch.tensor(float(rows.shape[0]), device=rows.device)
    if dist.get_world_size() > 1:
        dist.all_reduce(total)
        dist.all_reduce(count)
    return center * momentum + total / count * (1 - momentum)


def dino_loss_per_image(student_logits, teacher_probs, student_temp=0.1):
    """Cross-entropy of the teacher's global-crop targets against the student's prediction on
    every other crop, averaged over the (target, crop) pairs, per image.

    Args:
        student_logits (Sequence[Tensor]): one [B, K] per crop, the global crops first.
        teacher_probs (Sequence[Tensor]): one [B, K] per global crop (:func:`sharpen`).
        student_temp (float): the student's temperature.

    Returns:
        [B]: for each image, the mean over the pairs (global crop q, crop v != q) of
        ``-sum_k teacher_probs[q][k] * log_softmax(student_logits[v] / student_temp)[k]``.
    """
    log_p = [F.log_softmax(s / student_temp, dim=-1) for s in student_logits]
    total, pairs = 0, 0
    for q, target in enumerate(teacher_probs):
        for v, lp in enumerate(log_p):
            if v == q:  # the same crop: nothing to learn
                continue
            total = total + (-target * lp).sum(-1)
            pairs += 1
    return total / pairs


@MODELS.register_module()
class DINOSelfDistillation(BaseModel):
    """DINO: self-distillation with no labels, for a densevit :class:`VisionTransformer` with a
    class token.

    The student (``backbone`` + ``head``, a :class:`DINOProjectionHead` on the class token)
    sees every crop of an image (``num_global_crops`` global ones first, then the local ones,
    from the :class:`~densevit.datasets.transforms.dino_multi_crop.DINOMultiCrop` transform);
    the teacher (``teacher.backbone`` + ``teacher.head``, the same architecture, no dropout or
    drop path) sees the global crops only. The teacher's outputs are centred (minus
    ``center``, an EMA of their batch means, ``center_momentum``) and sharpened (temperature
    from ``teacher_temp``) into targets; the loss is their cross-entropy with the student's
    softmax at ``student_temp`` on every other crop (:func:`dino_loss_per_image`). Only the
    student gets gradients; after each optimiser step :class:`~densevit.engine.
    dino_teacher_hook.DINOTeacherUpdateHook` calls :meth:`update_teacher` (the teacher becomes
    an EMA of the student, momentum on DINO's cosine schedule).

    State kept in the checkpoint (so a resumed run goes on where it stopped): the teacher's
    weights (``teacher.*``), ``center`` [1, K] and ``steps`` (teacher updates done: the
    position on the momentum and temperature schedules). ``backbone.*`` is the student ViT's
    state dict and ``teacher.backbone.*`` the teacher's (the paper evaluates the teacher;
    ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='teacher.backbone.')``).

    Args:
        backbone (dict): a ``VisionTransformer`` config with ``with_cls_token=True``.
        head (dict): a ``DINOProjectionHead`` config (``in_channels`` set from the backbone).
        num_global_crops (int): the crops the teacher sees, >= 2 (DINO: 2).
        student_temp (float): DINO: 0.1.
        teacher_temp (dict): ``start``, ``end``, ``warmup_steps`` of
            :func:`teacher_temperature`; those left out: 0.04, 0.04, 0 (the official
            defaults; its authors use 0.04 -> 0.07 over 30 epochs for longer runs).
        center_momentum (float): DINO: 0.9.
        momentum (dict): ``base``, ``final``, ``total_steps`` of :func:`cosine_momentum`;
            those left out: 0.996, 1.0, 1000 (``total_steps``: give the run's optimiser steps).
        max_forwards_without_update (int): training forwards in 'loss' mode allowed since the
            last teacher update before an error says the hook is missing (raise it for
            gradient accumulation over more iterations).
        data_preprocessor (dict): a ``MultiCropDataPreprocessor``.

    Modes ('tensor', 'loss', 'predict'), ``inputs``: a list of [B, 3, h, w] crops:
        'tensor': ``dict(student=[per crop [B, K]], teacher=[per global crop [B, K]])``;
        'loss': ``dict(loss_dino=..., teacher_temp=..., teacher_entropy=...)``, and the
            center updated;
        'predict': each DataSample gets ``pretrain_loss`` (its DINO loss at the final teacher
            temperature ``teacher_temp['end']``, the center unchanged).

    Raises ValueError at build time naming the value: fewer than two global crops, a
    backbone without class token, a temperature or momentum out of range.
    """

    def __init__(self, backbone, head, num_global_crops=2, student_temp=0.1,
                 teacher_temp=None, center_momentum=0.9, momentum=None,
                 max_forwards_without_update=16, data_preprocessor=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        if int(num_global_crops) != num_global_crops or num_global_crops < 2:
            raise ValueError(f'DINOSelfDistillation: num_global_crops must be an integer >= 2 '
                             f'(the teacher sees the global crops and each is scored against '
                             f'the others), got {num_global_crops}')
        backbone = dict(backbone)
        if not backbone.get('with_cls_token', True):
            raise ValueError('DINOSelfDistillation: the backbone needs a class token (the head '
                             'reads it): with_cls_token=True, got with_cls_token=False')
        self.teacher_temp = dict(dict(start=0.04, end=0.04, warmup_steps=0),
                                 **(teacher_temp or {}))
        self.momentum = dict(dict(base=0.996, final=1.0, total_steps=1000), **(momentum or {}))
        for name, value in (('student_temp', student_temp),
                            ('teacher_temp.start', self.teacher_temp['start']),
                            ('teacher_temp.end', self.teacher_temp['end'])):
            if not value > 0:
                raise ValueError(f'DINOSelfDistillation: {name} must be > 0, got {value}')
        for name, value in (('center_momentum', center_momentum),
                            ('momentum.base', self.momentum['base']),
                            ('momentum.final', self.momentum['final'])):
            if not 0 <= value <= 1:
                raise ValueError(f'DINOSelfDistillation: {name} must be in [0, 1], got {value}')
        if not self.momentum['total_steps'] >= 1:
            raise ValueError(f'DINOSelfDistillation: momentum.total_steps must be >= 1, got '
                             f'{self.momentum["total_steps"]}')
        self.backbone = MODELS.build(backbone)
        if not isinstance(self.backbone, VisionTransformer):
            raise TypeError(f'DINOSelfDistillation: the backbone must be a VisionTransformer, '
                            f'got {type(self.backbone).__name__}')
        self.head = MODELS.build(dict(dict(head), in_channels=self.backbone.embed_dims))
        teacher_backbone = dict(backbone, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0,
                                init_cfg=None)
        self.teacher = nn.ModuleDict(dict(backbone=MODELS.build(teacher_backbone),
                                          head=copy.deepcopy(self.head)))
        self.teacher.requires_grad_(False)
        self.register_buffer('center', torch.zeros(1, self.head.out_channels))
        self.register_buffer('steps', torch.zeros((), dtype=torch.long))
        self.num_global_crops = int(num_global_crops)
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.max_forwards_without_update = max_forwards_without_update
        self._forwards_since_update = 0

    def init_weights(self):
        """The student's initialisation (or ``init_cfg`` checkpoint), then the teacher made
        its copy, as DINO starts."""
        super().init_weights()
        self.teacher.backbone.load_state_dict(self.backbone.state_dict())
        self.teacher.head.load_state_dict(self.head.state_dict())

    def train(self, mode=True):
        super().train(mode)
        self.teacher.eval()  # never trained: no dropout, whatever the mode
        return self

    def student_pairs(self):
        """(student parameter, teacher parameter) pairs, the teacher's in the same order."""
        for s, t in ((self.backbone, self.teacher.backbone), (self.head, self.teacher.head)):
            yield from zip(s.parameters(), t.parameters(), strict=True)

    @torch.no_grad()
    def update_teacher(self):
        """One EMA step after an optimiser step: ``teacher = m * teacher + (1 - m) * student``
        with ``m = cosine_momentum(steps, ...)``; then ``steps += 1``. Returns m."""
        m = cosine_momentum(int(self.steps), self.momentum['total_steps'],
                            self.momentum['base'], self.momentum['final'])
        for s, t in self.student_pairs():
            t.mul_(m).add_(s.detach().to(t.dtype), alpha=1 - m)
        self.steps += 1
        self._forwards_since_update = 0
        return m

    def current_teacher_temp(self):
        t = self.teacher_temp
        return teacher_temperature(int(self.steps), t['start'], t['end'], t['warmup_steps'])

    def check_crops(self, crops):
        if not isinstance(crops, (list, tuple)) or len(crops) < self.num_global_crops:
            n = len(crops) if isinstance(crops, (list, tuple)) else 'a tensor, not a list of'
            raise ValueError(f'DINOSelfDistillation: inputs must be a list of at least '
                             f'{self.num_global_crops} crops (the global ones first), got {n} '
                             f'(use DINOMultiCrop, PackMultiCropInputs and '
                             f'MultiCropDataPreprocessor)')
        size = tuple(crops[0].shape[-2:])
        for i, c in enumerate(crops):
            if i < self.num_global_crops and tuple(c.shape[-2:]) != size:
                raise ValueError(f'DINOSelfDistillation: global crop {i} is '
                                 f'{c.shape[-2]}x{c.shape[-1]}, global crop 0 {size[0]}x{size[1]}')
            if i >= self.num_global_crops and (c.shape[-2] > size[0] or c.shape[-1] > size[1]):
                raise ValueError(f'DINOSelfDistillation: local crop {i} is '
                                 f'{c.shape[-2]}x{c.shape[-1]}, larger than the global crops '
                                 f'({size[0]}x{size[1]})')

    @staticmethod
    def project(backbone, head, crops):
        """Per crop [B, K]: the head on the class token; crops of one size in one forward."""
        tokens, start = [], 0
        while start < len(crops):
            end = start + 1
            while end < len(crops) and crops[end].shape[-2:] == crops[start].shape[-2:]:
                end += 1
            tokens.append(backbone.forward_visible(torch.cat(crops[start:end]))[:, 0])
            start = end
        return list(head(torch.cat(tokens)).chunk(len(crops)))

    def forward(self, inputs, data_samples=None, mode='tensor'):
        if mode not in ('loss', 'predict', 'tensor'):
            raise ValueError(f"DINOSelfDistillation.forward: mode must be 'loss', 'predict' or "
                             f"'tensor', got {mode!r}")
        self.check_crops(inputs)
        with torch.no_grad():
            teacher = self.project(self.teacher.backbone, self.teacher.head,
                                   inputs[:self.num_global_crops])
        student = self.project(self.backbone, self.head, inputs)
        if mode == 'tensor':
            return dict(student=student, teacher=teacher)
        if mode == 'loss':
            return self.loss(student, teacher)
        if data_samples is None:
            data_samples = [DataSample() for _ in range(inputs[0].shape[0])]
        probs = [sharpen(t, self.center, self.teacher_temp['end']) for t in teacher]
        losses = dino_loss_per_image(student, probs, self.student_temp)
        for ds, loss in zip(data_samples, losses, strict=True):
            ds.pretrain_loss = loss.detach()
        return data_samples

    def loss(self, student, teacher):
        if self.training:
            self._forwards_since_update += 1
            if self._forwards_since_update > self.max_forwards_without_update:
                raise RuntimeError(
                    f'DINOSelfDistillation: {self._forwards_since_update} training steps without '
                    f'a teacher update; add custom_hooks=[dict(type="DINOTeacherUpdateHook")] '
                    f'(or raise max_forwards_without_update for gradient accumulation)')
        temp = self.current_teacher_temp()
        probs = [sharpen(t, self.center, temp) for t in teacher]
        loss = dino_loss_per_image(student, probs, self.student_temp).mean()
        if self.training:
            self.center.copy_(updated_center(self.center, torch.stack(teacher),
                                             self.center_momentum))
        p = torch.cat(probs)
        entropy = -(p * p.clamp_min(1e-12).log()).sum(-1).mean()
        return dict(loss_dino=loss, teacher_temp=loss.new_tensor(temp),
                    teacher_entropy=entropy.detach())
