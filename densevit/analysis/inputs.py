"""Models and images for the ViT analysis tools (``tools/analysis/``).

The tools read a ViT backbone out of any config (a detector, a segmentor or a
bare ``VisionTransformer``), feed it images normalised as the config's data
preprocessor would, and capture attention in the same forward pass.
"""
import os
from contextlib import contextmanager

import mmcv
import numpy as np
import torch

from densevit.apis import init_model

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp')
_IMAGENET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], bgr_to_rgb=True)


def find_vit(model):
    """The ViT backbone of ``model`` (its ``backbone``, or the model itself)."""
    vit = getattr(model, 'backbone', model)
    if not (hasattr(vit, 'blocks') and hasattr(vit, 'patch_embed')):
        raise TypeError(f'{type(vit).__name__} is not a plain ViT backbone (the analysis tools '
                        f'read VisionTransformer: patch_embed, pos_embed, blocks)')
    return vit


def load_vit_model(config, checkpoint, device='cpu', cfg_options=None):
    """(model, vit backbone) from a config (with ``cfg_options`` merged) and checkpoint, in
    eval mode."""
    model = init_model(config, checkpoint, device=device, cfg_options=cfg_options)
    return model, find_vit(model)


def default_image_size(vit):
    """(H, W) the position table was made for: its grid times the backbone stride."""
    pe = vit.pos_embed[0] if isinstance(vit.pos_embed, torch.nn.ModuleList) else vit.pos_embed
    hw = getattr(pe, 'num_patches_hw', None)
    if hw is None:
        return (224, 224)
    return tuple(s * vit.out_strides[0] for s in hw)


def list_images(paths):
    """Files from image paths and folders (folders: sorted, non-recursive)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p)
                            if f.lower().endswith(IMAGE_EXTS))
        else:
            files.append(p)
    return files


def procedural_images(num, size, seed=0):
    """``num`` shapes-dataset images (BGR uint8 [H, W, 3]) when no files are given."""
    from densevit.datasets.shapes import render_image
    rng = np.random.default_rng(seed)
    return [render_image(rng, size)['img'] for _ in range(num)]


def load_images(paths, num_images, size, seed=0):
    """Up to ``num_images`` BGR uint8 images resized to ``size`` (H, W); procedural if no paths."""
    files = list_images(paths)[:num_images]
    if not files:
        return procedural_images(num_images, size, seed)
    return [mmcv.imresize(mmcv.imread(f), (size[1], size[0])) for f in files]


def normalisation(cfg):
    """mean, std, bgr_to_rgb of the config's data preprocessor (ImageNet defaults)."""
    dp = dict(_IMAGENET, **dict(cfg.model.get('data_preprocessor') or {}))
    return dp['mean'], dp['std'], dp.get('bgr_to_rgb', False)


def to_tensor(images, cfg, device='cpu'):
    """BGR uint8 images -> [B, 3, H, W] float, normalised as the model expects."""
    mean, std, bgr_to_rgb = normalisation(cfg)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    if bgr_to_rgb:
        x = x.flip(1)
    mean = torch.tensor(mean).view(1, -1, 1, 1)
    std = torch.tensor(std).view(1, -1, 1, 1)
    return ((x - mean) / std).to(device)


@contextmanager
def all_layers(vit):
    """Run every layer: a backbone stops after its last ``out_indices`` layer."""
    saved = vit.out_indices
    vit.out_indices = [vit.num_layers - 1]
    try:
        yield vit
    finally:
        vit.out_indices = saved


def bgr_to_rgb(img):
    return np.ascontiguousarray(img[..., ::-1])


def add_image_figure_arguments(parser, config_help, checkpoint_help, num, out):
    """The arguments every per-image figure tool shares: CONFIG, CHECKPOINT, ``--num`` rows,
    ``--out`` PNG, ``--folder`` (images from a folder instead of the validation set)."""
    parser.add_argument('config', help=config_help)
    parser.add_argument('checkpoint', help=checkpoint_help)
    parser.add_argument('--num', type=int, default=num, help='images (rows)')
    parser.add_argument('--out', default=out, help='PNG to write')
    parser.add_argument('--folder', help='images from this folder instead of the validation set')
