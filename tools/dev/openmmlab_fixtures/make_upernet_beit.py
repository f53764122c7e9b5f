"""Fixture for tests/checkpoint/test_openmmlab_upernet_beit.py: a tiny MMSegmentation
UperNet + BEiT.

``mmseg_upernet_beit``: an ``EncoderDecoder`` built as mmseg's
``configs/_base_/models/upernet_beit.py`` (the backbone of
``configs/beit/beit-base_upernet_8xb2-160k_ade20k-640x640.py``: ``BEiT`` with q and v biases,
LayerScale 0.1, a relative position bias per layer, LayerNorm eps 1e-6; ``Feature2Pyramid``
rescaling four layers' maps by 4, 2, 1 and 1/2; ``UPerHead`` with pool scales 1, 2, 3, 6; one
``FCNHead(num_convs=1, concat_input=False)`` auxiliary head on the third map, given as a
dict, loss weight 0.4), shrunk: BEiT of width 16, 4 layers (all four are the outputs), 2
heads, MLP ratio 2, patch 4, ``img_size=(20, 28)`` (a 5 x 7 patch grid: not square, so a
transposed table shows), heads 8 wide, 5 classes; BN for mmseg's SyncBN (the same module on
one process). Every tensor randomised (``randomize_``, seed 0: the relative-position tables
and LayerScale gammas included) and saved as mmengine saves it.

mmseg's ``BEiT`` never resizes its relative-position table: its index is built for the
``img_size`` grid, so it runs only on inputs whose patch grid is that one (its patch
convolution has no padding: the last rows and columns that do not fill a patch are dropped).
The inputs are therefore all 5 x 7 grids: ``batch``: two images (23x30 and 21x29)
zero-padded bottom / right to one 23x30 batch by mmseg's ``stack_batch``, with mmseg's test
metainfo (the second as if resized from 12x17), and mmseg's ``loss`` on it; ``20x28``: an
image of exactly the grid; ``23x31``: one whose last 3 rows and columns are dropped.
``mmseg_upernet_beit_io.pth`` holds per input what ``make_upernet.py`` records, the heads'
logits on the neck's maps (mmseg's ``extract_feat``), and ``neck``: the neck's four maps.

Run from the repository root with the reference environment:
    PYTHONPATH=.:tools/dev/openmmlab_fixtures .venv-openmmlab/bin/python \\
        tools/dev/openmmlab_fixtures/make_upernet_beit.py
"""
import copy

import torch
from common import import_openmmlab, seg_outputs
from make_upernet import BN, CFG, metadata, write

NAME = 'mmseg_upernet_beit'
WIDTH, LAYERS, HEADS, PATCH, IMG = 16, 4, 2, 4, (20, 28)
BEIT_CFG = copy.deepcopy(CFG)
BEIT_CFG['backbone'] = dict(
    type='BEiT', img_size=IMG, patch_size=PATCH, in_channels=3, embed_dims=WIDTH,
    num_layers=LAYERS, num_heads=HEADS, mlp_ratio=2, out_indices=(0, 1, 2, 3), qv_bias=True,
    attn_drop_rate=0.0, drop_path_rate=0.1, norm_cfg=dict(type='LN', eps=1e-6),
    act_cfg=dict(type='GELU'), norm_eval=False, init_values=0.1)
BEIT_CFG['neck'] = dict(type='Feature2Pyramid', embed_dim=WIDTH, rescales=[4, 2, 1, 0.5],
                        norm_cfg=BN)
BEIT_CFG['decode_head'].update(in_channels=[WIDTH] * 4, in_index=[0, 1, 2, 3])
BEIT_CFG['auxiliary_head'].update(in_channels=WIDTH, in_index=2)


def inputs():
    """A padded batch (as mmseg's stack_batch pads: bottom / right, zeros) and single images,
    every one of the model's patch grid."""
    from mmseg.utils import stack_batch
    g = torch.Generator().manual_seed(1)
    images = [torch.randn(3, 23, 30, generator=g), torch.randn(3, 21, 29, generator=g)]
    batch, _ = stack_batch(images, size_divisor=1, pad_val=0)
    singles = {f'{h}x{w}': torch.randn(1, 3, h, w, generator=g) for h, w in ((20, 28), (23, 31))}
    return dict(batch=batch, **singles)


@torch.no_grad()
def outputs(model, x, samples):
    """``common.seg_outputs``, with the heads' logits on the neck's maps (``extract_feat``, as
    mmseg's segmentor runs them) and those maps as ``neck``."""
    out = seg_outputs(model, x, samples)
    feats = model.extract_feat(x)
    out.update(neck=list(feats), decode=model.decode_head(feats),
               aux=model.auxiliary_head(feats))
    return out


def main():
    import_openmmlab()
    xs = inputs()
    xs.update(metadata(xs, shapes=((23, 30), (21, 29)), ori_shapes=((23, 30), (12, 17))))
    write(NAME, BEIT_CFG, xs, f'{NAME}: mmseg EncoderDecoder(BEiT (embed {WIDTH}, {LAYERS} '
          f'layers, {HEADS} heads, mlp_ratio 2, patch {PATCH}, img_size {IMG}, outputs of every '
          f'layer), Feature2Pyramid (4, 2, 1, 0.5), UPerHead, FCNHead auxiliary on the third '
          f'map) randomised, eval mode: backbone and neck maps, decode and auxiliary logits, predict '
          f'seg_logits / pred_sem_seg per input, and the losses on the padded batch',
          outputs=outputs)


if __name__ == '__main__':
    main()
