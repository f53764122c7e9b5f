"""Fixtures for tests/checkpoint/test_openmmlab_setr.py: tiny MMSegmentation SETR models.

Three segmentors built like mmseg's ADE20K zoo configs (``setr_vit-l_{naive,pup,mla}_
8xb2-160k_ade20k-512x512.py``: same heads, auxiliary heads, norms and eps, backbone
options), shrunk to a 4-layer ViT of width 32 (MLP 32) with 8x8 patches and a position table for
32x32 images (4x4 grid), 3 classes, every tensor randomised. To keep the files small the
auxiliary heads upsample x2 per stage instead of the zoo's x4 (a factor without weights). Saved as mmengine saves them; ``*_io.pth`` holds the
backbone maps, decode and auxiliary logits (eval mode) for

- ``batch``: two images (16x24 and 8x24) zero-padded to one 16x24 batch (2x3 grid;
  mmseg's test data preprocessor does not pad, so the batch is the padded tensor itself);
- ``other``: one 24x40 image (3x5 grid);
- ``odd`` (Naive only, to keep the files small): one 20x27 image, not whole patches:
  mmseg's ViT pads it at the bottom / right (``patch_pad='corner'``) to 24x32; also
  mmseg's sliding-window logits on it (12x12 windows every 9 pixels: each window is
  padded to 16x16 inside the ViT and its logits resized back to 12x12).

Run from the repository root with the reference environment:
    PYTHONPATH=tools/dev/openmmlab_fixtures:tests/tools /work/fx/venv/bin/python \
        tools/dev/openmmlab_fixtures/make_setr.py
"""
import copy

import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions

from densevit.utils.random_init import randomize_

D, K, C, P = 32, 3, 8, 8  # width, classes, head channels
LN = dict(type='LN', eps=1e-6, requires_grad=True)
BN = dict(type='BN', requires_grad=True)  # SyncBN in the zoo; the same module on one process


def backbone(with_cls_token, out_indices, num_layers):
    return dict(type='VisionTransformer', img_size=(32, 32), patch_size=P, in_channels=3,
                embed_dims=D, num_layers=num_layers, num_heads=4, mlp_ratio=1, out_indices=out_indices,
                drop_rate=0., norm_cfg=LN, with_cls_token=with_cls_token,
                interpolate_mode='bilinear')


def up_head(in_index, num_convs, up_scale, kernel_size, weight):
    return dict(type='SETRUPHead', in_channels=D, channels=C, in_index=in_index,
                num_classes=K, dropout_ratio=0, norm_cfg=BN, act_cfg=dict(type='ReLU'),
                num_convs=num_convs, up_scale=up_scale, kernel_size=kernel_size,
                align_corners=False,
                loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=weight))


def segmentor(backbone_cfg, decode_head, auxiliary_head, neck=None):
    cfg = dict(type='EncoderDecoder', backbone=backbone_cfg, decode_head=decode_head,
               auxiliary_head=auxiliary_head, train_cfg=dict(), test_cfg=dict(mode='whole'))
    if neck is not None:
        cfg['neck'] = neck
    return cfg


CONFIGS = {
    # setr_naive.py + the ADE20K config's auxiliary heads (num_convs=2, kernel 1)
    'mmseg_setr_naive': segmentor(
        backbone(True, (0, 1, 2, 3), 4), up_head(3, 1, 4, 1, 1.0),
        [up_head(i, 2, 2, 1, 0.4) for i in (0, 1, 2)]),
    # setr_pup.py + the ADE20K config's auxiliary heads (num_convs=2, kernel 3)
    'mmseg_setr_pup': segmentor(
        backbone(True, (0, 1, 2, 3), 4), up_head(3, 4, 2, 3, 1.0),
        [up_head(i, 2, 2, 3, 0.4) for i in (0, 1, 2)]),
    # setr_mla.py: no class token, MLA neck, FCNHead(num_convs=0) per level
    'mmseg_setr_mla': segmentor(
        backbone(False, (0, 1, 2, 3), 4),
        dict(type='SETRMLAHead', in_channels=(C, C, C, C), channels=4 * 4,
             in_index=(0, 1, 2, 3), dropout_ratio=0, mla_channels=4, num_classes=K,
             norm_cfg=BN, align_corners=False,
             loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
        [dict(type='FCNHead', in_channels=C, channels=C, in_index=i, dropout_ratio=0,
              norm_cfg=BN, act_cfg=dict(type='ReLU'), num_convs=0, kernel_size=1,
              concat_input=False, num_classes=K, align_corners=False,
              loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=0.4))
         for i in (0, 1, 2, 3)],
        neck=dict(type='MLANeck', in_channels=[D] * 4, out_channels=C, norm_cfg=BN,
                  act_cfg=dict(type='ReLU'))),
}


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(3, 16, 24, generator=g), torch.randn(3, 8, 24, generator=g)
    batch = torch.zeros(2, 3, 16, 24)
    batch[0], batch[1, :, :8] = a, b
    return dict(batch=batch, batch_img_shapes=torch.tensor([[16, 24], [8, 24]]),
                other=torch.randn(1, 3, 24, 40, generator=g),
                odd=torch.randn(1, 3, 20, 27, generator=g))


@torch.no_grad()
def outputs(model, x):
    feats = model.backbone(x)
    neck = model.neck(feats) if model.with_neck else feats
    return dict(backbone=list(feats), neck=list(neck) if model.with_neck else [],
                decode=model.decode_head(neck),
                aux=[head(neck) for head in model.auxiliary_head])


@torch.no_grad()
def slide_logits(model, x):
    """mmseg's sliding-window logits [1, K, H, W]: 12x12 windows every 9 pixels."""
    from mmengine.config import ConfigDict
    model.test_cfg = ConfigDict(mode='slide', crop_size=(12, 12), stride=(9, 9))
    shape = tuple(x.shape[-2:])
    return model.inference(x, [dict(img_shape=shape, ori_shape=shape, pad_shape=shape)])


def main():
    import_openmmlab()
    for seed, (name, cfg) in enumerate(CONFIGS.items()):
        model = randomize_(build('mmseg', copy.deepcopy(cfg)), seed=seed)
        save_like_mmengine(model, name, cfg, 'mmseg',
                           dataset_meta=dict(classes=tuple(f'c{i}' for i in range(K))))
        x = inputs(100 + seed)
        if name != 'mmseg_setr_naive':
            del x['odd']
        out = {k: outputs(model, x[k]) for k in ('batch', 'other', 'odd') if k in x}
        if 'odd' in x:
            out['odd']['slide'] = slide_logits(model, x['odd'])
        save_io(name, x, out, f'{name}: mmseg EncoderDecoder (eval) backbone maps, neck maps, '
                f'decode and auxiliary logits on a padded batch, a 24x40 and a 20x27 image; '
                f'{versions()}')


if __name__ == '__main__':
    main()
