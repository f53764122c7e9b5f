"""MMDetection 3.3 Co-DETR fixture (stage 1): the collaborative ATSS auxiliary head.

Co-DETR lives in MMDetection's ``projects/CO-DETR/codetr/`` (not in the mmdet wheel). Put
that folder of a checkout of https://github.com/open-mmlab/mmdetection (v3.3.0; only
``co_atss_head.py`` is imported) at ``$CODETR_REF/codetr/`` or give the folder as the first
argument (default ``/tmp/codetr_ref``), outside this repository or where git ignores it:
its module registers ``CoATSSHead`` into mmdet's registry. Without it this script says so
and writes nothing.

The model is ``CoATSSHead`` as Co-DINO's config builds it (one stacked convolution per
branch, one square anchor of 8 strides per location, deltas with stds (0.1, 0.1, 0.2, 0.2),
focal / GIoU / centerness losses weighted 12 / 24 / 12, ``ATSSAssigner(topk=9)``, every
anchor allowed), made tiny: 16 channels, GroupNorm of 8 groups, 3 classes, 5 levels of
strides 8..128 (a 4-level DINO's encoder maps plus the downsampled extra level), every
tensor random. Saved under ``bbox_head.0.`` (the key prefix of a Co-DINO file). Inputs:
random maps of a batch of three images of 192 x 256 (the ground truth: 4, 2 and no boxes).
Outputs: eval mode, the per-level classification logits, box deltas and centerness; a
training step: the per-level losses, what ATSS assigned (``assigned``: per image the
1-based gt index of every anchor, 0 = negative), the targets the head returns for Co-DETR's
positive queries (``pos_coords``: labels and box targets per image, the anchors of one), and every
parameter's gradient of the losses' sum.
"""
import importlib.util
import os
import sys
from pathlib import Path

import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions
from torch import nn

from densevit.utils.random_init import randomize_

C, K = 16, 3
STRIDES = [8, 16, 32, 64, 128]
PAD = (192, 256)
GT = [  # per image: xyxy pixels, labels
    (torch.tensor([[4.0, 6.0, 30.0, 40.0], [20.0, 2.0, 124.0, 90.0], [70.5, 50.0, 78.0, 61.0],
                   [8.0, 10.0, 250.0, 185.0]]), torch.tensor([0, 2, 1, 2])),
    (torch.tensor([[10.0, 8.0, 50.0, 36.0], [60.0, 20.0, 120.0, 95.0]]), torch.tensor([1, 1])),
    (torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)),
]
LAMBDA = 1.0 * 6 * 2.0  # Co-DINO: decoder layers x loss_lambda


def head_cfg():
    return dict(
        type='CoATSSHead', num_classes=K, in_channels=C, stacked_convs=1, feat_channels=C,
        norm_cfg=dict(type='GN', num_groups=8, requires_grad=True),
        anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                              scales_per_octave=1, strides=STRIDES),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4,
                        target_stds=[0.1, 0.1, 0.2, 0.2]),
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=LAMBDA),
        loss_bbox=dict(type='GIoULoss', loss_weight=2.0 * LAMBDA),
        loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=LAMBDA),
        train_cfg=dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1,
                       pos_weight=-1, debug=False),
        test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                      nms=dict(type='nms', iou_threshold=0.6), max_per_img=100))


def import_codetr(folder, name='co_atss_head'):
    """Import ``{folder}/codetr/{name}.py`` (its classes register into mmdet's registry);
    None when the file is not there."""
    path = Path(folder) / 'codetr' / f'{name}.py'
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f'codetr_{name}', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def metas():
    H, W = PAD
    return [dict(img_shape=(H, W), pad_shape=(H, W), batch_input_shape=(H, W))
            for _ in GT]


def train_step(head, feats):
    from mmengine.structures import InstanceData
    record = []
    assign = head.assigner.assign

    def recorded(*args, **kwargs):
        result = assign(*args, **kwargs)
        record.append(result.gt_inds.clone())
        return result
    head.assigner.assign = recorded
    head.train()
    try:
        outs = head(feats)
        gts = [InstanceData(bboxes=b.clone(), labels=c.clone()) for b, c in GT]
        losses = head.loss_by_feat(*outs, gts, metas())
        anchors, labels, targets, _ = losses.pop('pos_coords')
        head.zero_grad()
        sum(sum(v) for v in losses.values()).backward()
        grads = {f'bbox_head.0.{k}': p.grad.clone() for k, p in head.named_parameters()
                 if p.grad is not None}
    finally:
        del head.assigner.assign
        head.eval()
    return dict(losses={k: torch.stack([x.detach() for x in v]) for k, v in losses.items()},
                assigned=record, pos_anchors=anchors[0], pos_labels=labels, pos_targets=targets,
                grads=grads)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('CODETR_REF', '/tmp/codetr_ref')
    import_openmmlab()
    if import_codetr(folder) is None:
        print(f'make_codetr.py: skipped, no {folder}/codetr/co_atss_head.py (MMDetection '
              f"v3.3.0's projects/CO-DETR/codetr; see this script's docstring)")
        return
    name = 'mmdet_codetr_atss'
    head = build('mmdet', head_cfg())
    randomize_(head, seed=0)
    holder = nn.Module()
    holder.bbox_head = nn.ModuleList([head])
    save_like_mmengine(holder, name, dict(bbox_head=[head_cfg()]), 'mmdet',
                       dict(classes=('a', 'b', 'c')))
    g = torch.Generator().manual_seed(10)
    feats = [torch.randn(len(GT), C, -(-PAD[0] // s), -(-PAD[1] // s), generator=g)
             for s in STRIDES]
    with torch.no_grad():
        cls, box, ctr = head(feats)
    outputs = dict(eval=dict(cls=cls, box=box, ctr=ctr), train=train_step(head, feats))
    inputs = dict(feats=feats, gt_bboxes=[b for b, _ in GT], gt_labels=[c for _, c in GT],
                  pad=torch.tensor(PAD))
    save_io(name, inputs, outputs,
            f'mmdet Co-DETR CoATSSHead (projects/CO-DETR), C={C}, {K} classes, strides '
            f'{STRIDES}; eval outputs and one training step; {versions()}')


if __name__ == '__main__':
    main()
