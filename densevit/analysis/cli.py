"""Command-line plumbing shared by the ViT figure tools in ``tools/analysis/``.

Argument parser, model set-up, batched forward passes with attention captured,
JSON output (with the provenance of :mod:`densevit.utils.provenance`) and timing: what
``pos_embed_similarity.py``, ``patch_filters.py``, ``attention_distance.py``,
``attention_rollout.py``, ``detr_attention.py`` and ``token_similarity.py`` share.
"""
import argparse
import os
import os.path as osp
import time

import torch
from mmengine.config import DictAction

from densevit.analysis.attention_capture import capture_attention
from densevit.analysis.inputs import (
    all_layers,
    default_image_size,
    load_images,
    load_vit_model,
    to_tensor,
)
from densevit.utils.provenance import add_json_argument, write_result


def base_parser(description, images=False, num_images=100):
    """CONFIG, CHECKPOINT, --out-dir, --json, --device, --cfg-options; with ``images``, the
    image arguments too."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument('config')
    p.add_argument('checkpoint', help="weights ('none' keeps the random initialisation)")
    if images:
        p.add_argument('images', nargs='*',
                       help='image files or folders; none: procedural shapes images')
        p.add_argument('--num-images', type=int, default=num_images)
        p.add_argument('--batch-size', type=int, default=10)
        p.add_argument('--img-size', type=int, nargs=2, metavar=('H', 'W'),
                       help="default: the size the position table was made for")
    p.add_argument('--out-dir', default='work_dirs/analysis')
    add_json_argument(p, 'the numbers', default='a file named after the tool in --out-dir')
    p.add_argument('--device', default='cpu')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                   help='override config settings (key=value), e.g. the model a checkpoint '
                        'was trained with: model.neck.num_layers=1')
    return p


def checkpoint_path(args):
    """The CHECKPOINT argument, None for 'none' (random weights)."""
    return None if args.checkpoint.lower() == 'none' else args.checkpoint


def setup(args):
    """Make ``args.out_dir``; return (model, vit backbone) (checkpoint 'none': random weights)."""
    os.makedirs(args.out_dir, exist_ok=True)
    return load_vit_model(args.config, checkpoint_path(args), args.device, args.cfg_options)


def captured_batches(model, vit, args):
    """Yield (images BGR, input [B,3,H,W], list of per-layer attention [B,h,N,N], grid hw)."""
    size = tuple(args.img_size) if args.img_size else default_image_size(vit)
    images = load_images(args.images, args.num_images, size)
    for start in range(0, len(images), args.batch_size):
        batch = images[start:start + args.batch_size]
        x = to_tensor(batch, model.cfg, args.device)
        with torch.no_grad(), all_layers(vit), capture_attention(vit) as rec:
            feat = vit(x)[-1]
        yield batch, x, rec.self_attn, tuple(feat.shape[-2:])


def write_json(args, file_name, data):
    """Write ``data`` to ``--json``, else to ``<out-dir>/<file_name>``, with its provenance
    and the config, checkpoint and ``--cfg-options`` it came from (:func:`write_result`);
    returns the path."""
    return write_result(args.json or osp.join(args.out_dir, file_name), data,
                        config=args.config, checkpoint=checkpoint_path(args),
                        cfg_options=dict(args.cfg_options))


class Timer:
    """``with Timer() as t:`` sets ``t.seconds`` (wall) and ``t.cpu_seconds`` on exit."""

    def __enter__(self):
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        # CPU time too: on a shared machine wall time says more about the neighbours
        self.cpu_seconds = time.process_time() - self.cpu_start
