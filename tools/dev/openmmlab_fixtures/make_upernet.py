"""Fixture for tests/checkpoint/test_openmmlab_upernet.py (and the backbone of
test_openmmlab_swin.py): a tiny MMSegmentation UperNet + Swin.

``mmseg_upernet_swin``: an ``EncoderDecoder`` built as mmseg's
``configs/_base_/models/upernet_swin.py`` (``SwinTransformer``, ``UPerHead`` with pool
scales 1, 2, 3, 6, one ``FCNHead(num_convs=1, concat_input=False)`` auxiliary head given as
a dict, loss weight 0.4), shrunk: Swin of width 16, depths 2/2, heads 1/2, window 7, MLP
ratio 2 (two stages, strides 4 and 8), heads 8 wide, 5 classes, the auxiliary head on the
first stage; every tensor randomised (``randomize_``, seed 0) and saved as mmengine saves
it. ``mmseg_upernet_swin_io.pth`` holds, in eval mode, per input (``outputs[name]``):
``backbone`` (the stage maps), ``decode`` and ``aux`` (the heads' logits at their own
resolution), ``seg_logits`` / ``pred_sem_seg`` (mmseg's ``predict`` per image, at
``ori_shape``), on

- ``batch``: two images (37x50 and 30x41) zero-padded bottom / right to one 37x50 batch
  by mmseg's ``stack_batch``, with mmseg's test metainfo (``img_shape``, ``pad_shape``,
  ``padding_size``, ``ori_shape``: the second as if resized from 20x27); also mmseg's
  ``loss`` (eval mode: BN statistics fixed, no dropout) against ``batch_labels`` (random
  classes, 255 on the padding, as the data preprocessor pads labels): ``losses``;
- ``29x29`` and ``56x56``: single images (Swin maps smaller than and equal to the window).

Run from the repository root with the reference environment:
    PYTHONPATH=.:tools/dev/openmmlab_fixtures .venv-openmmlab/bin/python \\
        tools/dev/openmmlab_fixtures/make_upernet.py
"""
import copy

import torch
from common import (
    build,
    import_openmmlab,
    save_io,
    save_like_mmengine,
    seg_outputs,
    seg_samples,
    versions,
)
from make_swin import WINDOW, inputs, swin_cfg

from densevit.utils.random_init import randomize_

NAME, K = 'mmseg_upernet_swin', 5
BN = dict(type='BN', requires_grad=True)  # SyncBN in the zoo; the same module on one process
CFG = dict(
    type='EncoderDecoder',
    data_preprocessor=dict(type='SegDataPreProcessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_val=0,
                           seg_pad_val=255, size=(64, 64)),
    backbone=swin_cfg(16, (2, 2), (1, 2), 2),
    decode_head=dict(type='UPerHead', in_channels=[16, 32], in_index=[0, 1],
                     pool_scales=(1, 2, 3, 6), channels=8, dropout_ratio=0.1,
                     num_classes=K, norm_cfg=BN, align_corners=False,
                     loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)),
    auxiliary_head=dict(type='FCNHead', in_channels=16, in_index=0, channels=8,
                        num_convs=1, concat_input=False, dropout_ratio=0.1,
                        num_classes=K, norm_cfg=BN, align_corners=False,
                        loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4)),
    train_cfg=dict(), test_cfg=dict(mode='whole'))


def metadata(xs, shapes=((37, 50), (30, 41)), ori_shapes=((37, 50), (20, 27))):
    """Each image's size (``img_shape``), original size and, for the batch, labels."""
    g = torch.Generator().manual_seed(2)
    shapes = torch.tensor(shapes)
    labels = torch.full((2, *xs['batch'].shape[-2:]), 255, dtype=torch.long)
    for label, (h, w) in zip(labels, shapes.tolist(), strict=True):
        label[:h, :w] = torch.randint(0, K, (h, w), generator=g)
    return dict(batch_img_shapes=shapes, batch_ori_shapes=torch.tensor(ori_shapes),
                batch_labels=labels.to(torch.uint8))  # stored small; long for the loss


def write(name, cfg, xs, about, outputs=seg_outputs):
    """Build ``cfg`` in mmseg, randomise it (seed 0), save it as mmengine does and save its
    ``outputs`` (``common.seg_outputs``' by default) on every input of ``xs`` (the batch with
    :func:`metadata`'s keys) and the losses on the batch."""
    from mmengine.config import ConfigDict
    model = randomize_(build('mmseg', ConfigDict(copy.deepcopy(cfg))), seed=0)
    save_like_mmengine(model, name, cfg, 'mmseg',
                       dataset_meta=dict(classes=[f'c{i}' for i in range(K)]))
    out = {}
    for case, x in xs.items():
        if not torch.is_tensor(x) or case.startswith('batch_'):
            continue
        if case == 'batch':
            shapes, ori = xs['batch_img_shapes'], xs['batch_ori_shapes']
        else:
            shapes = ori = torch.tensor([list(x.shape[-2:])])
        out[case] = outputs(model, x, seg_samples(x, shapes, ori))
    with torch.no_grad():  # eval mode: the same function as predict's, so comparable
        losses = model.loss(xs['batch'], seg_samples(
            xs['batch'], xs['batch_img_shapes'], xs['batch_ori_shapes'],
            xs['batch_labels'].long()))
    out['batch']['losses'] = {k: v.detach() for k, v in losses.items()}
    save_io(name, xs, out, f'{about}; {versions()}')


def main():
    import_openmmlab()
    xs = inputs()
    xs.update(metadata(xs))
    write(NAME, CFG, xs, f'{NAME}: mmseg EncoderDecoder(SwinTransformer (embed 16, depths 2/2, '
          f'heads 1/2, window {WINDOW}, mlp_ratio 2), UPerHead, FCNHead auxiliary) randomised, '
          f'eval mode: backbone maps, decode and auxiliary logits, predict seg_logits / '
          f'pred_sem_seg per input, and the losses on the padded batch')


if __name__ == '__main__':
    main()
