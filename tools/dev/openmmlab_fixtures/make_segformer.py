"""Fixture for tests/checkpoint/test_openmmlab_segformer.py: a tiny MMSegmentation SegFormer.

Built like mmseg's ``segformer_mit-b0_8xb2-160k_ade20k-512x512.py`` (``MixVisionTransformer``
with mmseg's LayerNorm eps 1e-6, ``SegformerHead`` with SyncBN, whole-image test), shrunk:
widths 16/24/32/32 (``embed_dims=8``, heads 2/3/4/4), depths 1/2/1/1, reduction ratios
4/2/2/1, MLP ratio 2, a 16-wide head and 5 classes, every tensor randomised. Saved as
mmengine saves it; ``mmseg_segformer_io.pth`` holds, in eval mode,

- ``batch``: two images (48x64 and 32x40) zero-padded to one 48x64 batch, with mmseg's
  test metainfo (``img_shape``, ``pad_shape``, ``padding_size`` = (left, right, top,
  bottom), ``ori_shape``: the second as if resized from 24x30): backbone maps, decode
  logits and ``predict``'s per-image ``seg_logits`` / ``pred_sem_seg`` at ``ori_shape``
  (mmseg's test data preprocessor does not pad, so the batch is the padded tensor itself);
- ``other``: one 45x37 image (not a multiple of 32): the same outputs.

Run from the repository root with the reference environment:
    PYTHONPATH=tools/dev/openmmlab_fixtures:tests/tools /work/fx/venv/bin/python \\
        tools/dev/openmmlab_fixtures/make_segformer.py
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

from densevit.utils.random_init import randomize_

NAME, K = 'mmseg_segformer', 5
CFG = dict(
    type='EncoderDecoder',
    backbone=dict(type='MixVisionTransformer', in_channels=3, embed_dims=8, num_stages=4,
                  num_layers=[1, 2, 1, 1], num_heads=[2, 3, 4, 4], patch_sizes=[7, 3, 3, 3],
                  sr_ratios=[4, 2, 2, 1], out_indices=(0, 1, 2, 3), mlp_ratio=2, qkv_bias=True,
                  drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1),
    decode_head=dict(type='SegformerHead', in_channels=[16, 24, 32, 32], in_index=[0, 1, 2, 3],
                     channels=16, dropout_ratio=0.1, num_classes=K,
                     norm_cfg=dict(type='SyncBN', requires_grad=True), align_corners=False,
                     loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                      loss_weight=1.0)),
    train_cfg=dict(), test_cfg=dict(mode='whole'))


def inputs():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 48, 64, generator=g), torch.randn(3, 32, 40, generator=g)
    batch = torch.zeros(2, 3, 48, 64)
    batch[0], batch[1, :, :32, :40] = a, b
    return dict(batch=batch, batch_img_shapes=torch.tensor([[48, 64], [32, 40]]),
                batch_ori_shapes=torch.tensor([[48, 64], [24, 30]]),
                other=torch.randn(1, 3, 45, 37, generator=g))


def main():
    import_openmmlab()
    from mmengine.config import ConfigDict
    model = randomize_(build('mmseg', ConfigDict(copy.deepcopy(CFG))), seed=0)
    save_like_mmengine(model, NAME, CFG, 'mmseg',
                       dataset_meta=dict(classes=tuple(f'c{i}' for i in range(K))))
    x = inputs()
    other_shape = torch.tensor([list(x['other'].shape[-2:])])
    batch = seg_samples(x['batch'], x['batch_img_shapes'], x['batch_ori_shapes'])
    other = seg_samples(x['other'], other_shape, other_shape)
    out = dict(batch=seg_outputs(model, x['batch'], batch),
               other=seg_outputs(model, x['other'], other))
    save_io(NAME, x, out, f'{NAME}: mmseg EncoderDecoder(MixVisionTransformer, SegformerHead) '
            f'(eval): backbone maps, decode logits, predict seg_logits / pred_sem_seg on a padded '
            f'batch and a 45x37 image; {versions()}')


if __name__ == '__main__':
    main()
