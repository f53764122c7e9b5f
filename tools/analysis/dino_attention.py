"""The class token's attention in a ViT's last layer, one map per head, as in the DINO paper's
Figure 1 (Caron et al. 2021).

    python tools/analysis/dino_attention.py configs/dino_ssl/dino_vit_shapes_quickstart.py \\
        work_dirs/dino_vit_shapes_quickstart/iter_2000.pth --num 6 --out dino_attention.png

One row per image, the first N of the config's validation (else test) dataset, or of
``--folder DIR``, each the largest centred square resized to the size the ViT's position table
was made for: the image, then the last layer's attention of the class token to every patch,
one panel per head (each panel scaled to its own minimum and maximum, viridis; ``--threshold
0.6``: DINO's masks instead, the smallest set of patches holding 60% of the head's attention
in white). Any model whose ``backbone`` is a densevit ViT with a class token: a DINO, MAE or
supervised checkpoint, so they can be drawn side by side; for a ``DINOSelfDistillation``
checkpoint the teacher is drawn (the paper's choice), ``--student`` draws the student. The PNG
is ``N*H + (N-1)*gap`` pixels high and ``(1 + heads)*W + heads*gap`` wide.
"""
import argparse
import sys

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from mmengine.config import DictAction

from densevit.analysis.attention_capture import capture_attention
from densevit.analysis.inputs import (
    add_image_figure_arguments,
    default_image_size,
    find_vit,
    to_tensor,
)
from densevit.apis import init_model
from densevit.checkpoint.model import CHECKPOINT_ERRORS
from densevit.registry import DATASETS


def load_images(cfg, folder, num, size):
    """The first ``num`` images (BGR uint8, the largest centred square resized to ``size``) of
    ``folder`` or of the config's validation (else test) dataset, with their paths."""
    pipeline = [dict(type='LoadImage'),
                dict(type='RandomResizedCrop', size=size, scale=(1.0, 1.0), ratio=(1.0, 1.0))]
    if folder:
        dataset = dict(type='UnlabelledImageDataset', data_root=folder, test_mode=True)
    else:
        loader = cfg.get('val_dataloader') or cfg.get('test_dataloader')
        if not loader:
            raise ValueError('the config has no val_dataloader or test_dataloader; give '
                             '--folder DIR')
        dataset = loader['dataset']
    dataset = DATASETS.build(dict(dataset, pipeline=pipeline))
    items = [dataset[i] for i in range(min(num, len(dataset)))]
    return [it['img'] for it in items], [it.get('img_path', '') for it in items]


def class_token_attention(vit, x):
    """x [B, 3, H, W] -> the last layer's attention of the class token to the patches,
    [B, heads, h, w] (rows of the full attention, so a head's map sums to 1 minus what it
    gives the class and register tokens)."""
    with torch.no_grad(), capture_attention(vit, cross_attn=False) as rec:
        tokens, hw = vit.embed(x)
        vit.encode(tokens, hw)
    attn = rec.self_attn[-1]  # [B, heads, N, N]
    return attn[:, :, 0, vit.num_extra_tokens:].reshape(*attn.shape[:2], *hw)


def mass_mask(maps, fraction):
    """[..., h, w] -> bool: the smallest set of cells of each map holding ``fraction`` of its
    total (DINO's ``--threshold``)."""
    flat = maps.flatten(-2)
    values, order = flat.sort(-1, descending=True)
    share = values.cumsum(-1) / values.sum(-1, keepdim=True)
    keep_sorted = share - values / values.sum(-1, keepdim=True) < fraction  # before crossing
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return keep.reshape(maps.shape)


def panel(head_map, size, threshold=None):
    """One head's [h, w] map -> a BGR uint8 panel of ``size`` (H, W), nearest upsampling."""
    m = head_map.float()
    if threshold is not None:
        grey = mass_mask(m, threshold).float()
    else:
        grey = (m - m.min()) / (m.max() - m.min()).clamp_min(1e-12)
    up = F.interpolate(grey[None, None], size=size, mode='nearest')[0, 0]
    grey = (up.numpy() * 255).round().astype(np.uint8)
    if threshold is not None:
        return np.repeat(grey[..., None], 3, axis=-1)
    return cv2.applyColorMap(grey, cv2.COLORMAP_VIRIDIS)


def figure(images, maps, gap=2, threshold=None):
    """Rows of image | head 0 | head 1 ..., ``gap`` white pixels apart."""
    H, W = images[0].shape[:2]
    heads = maps.shape[1]
    out = np.full((len(images) * H + (len(images) - 1) * gap,
                   (1 + heads) * W + heads * gap, 3), 255, np.uint8)
    for r, (img, m) in enumerate(zip(images, maps, strict=True)):
        y = r * (H + gap)
        out[y:y + H, :W] = img
        for k in range(heads):
            x = (k + 1) * (W + gap)
            out[y:y + H, x:x + W] = panel(m[k], (H, W), threshold)
    return out


def pick_vit(model, student):
    teacher = getattr(model, 'teacher', None)
    if teacher is not None and not student:
        return teacher['backbone'], f'the teacher of {type(model).__name__}'
    return find_vit(model), f'the backbone of {type(model).__name__}'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_image_figure_arguments(
        p, 'a config whose model has a ViT backbone with a class token',
        "its weights ('none': random initialisation)", 6, 'dino_attention.png')
    p.add_argument('--student', action='store_true',
                   help="DINOSelfDistillation: the student's ViT instead of the teacher's")
    p.add_argument('--threshold', type=float,
                   help="DINO's masks: the patches holding this fraction of each head's "
                        'attention (the paper: 0.6)')
    p.add_argument('--gap', type=int, default=2, help='white pixels between panels')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                   help='override config settings (key=value)')
    args = p.parse_args(argv)
    if args.num < 1:
        p.error(f'--num must be at least 1, got {args.num}')
    if args.threshold is not None and not 0 < args.threshold <= 1:
        p.error(f'--threshold must be in (0, 1], got {args.threshold}')
    checkpoint = None if args.checkpoint.lower() == 'none' else args.checkpoint
    try:
        model = init_model(args.config, checkpoint, cfg_options=args.cfg_options)
        vit, which = pick_vit(model, args.student)
        if vit.cls_token is None:
            raise ValueError(f'{which} has no class token (with_cls_token=False): this tool '
                             f'draws the class token\'s attention')
        images, _ = load_images(model.cfg, args.folder, args.num, default_image_size(vit))
        maps = class_token_attention(vit, to_tensor(images, model.cfg)).cpu()
    except (*CHECKPOINT_ERRORS, FileNotFoundError, ValueError, TypeError) as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    if not cv2.imwrite(args.out, figure(images, maps, args.gap, args.threshold)):
        print(f'densevit: could not write {args.out}', file=sys.stderr)
        return 1
    print(f'wrote {args.out}: {len(images)} images x {maps.shape[1]} heads, the class token\'s '
          f'last-layer attention in {which}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
