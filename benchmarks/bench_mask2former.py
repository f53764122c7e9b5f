"""Mask2Former against HF transformers on the same weights: speed, and peak training memory.

    OMP_NUM_THREADS=1 python benchmarks/bench_mask2former.py [--size 512] [--classes 150]
        [--repeats 5] [--only speed memory] [--device cpu|cuda] [--json FILE]
    # end to end at a tiny size (what tests/tools runs; a check, not a measurement):
    python benchmarks/bench_mask2former.py --tiny --repeats 1

The pair: HF's ``Mask2FormerForUniversalSegmentation`` on a Swin-T ``SwinBackbone`` (width 96,
depths 2-2-6-2, heads 3-6-12-24, window 7, no stochastic depth), the paper's ADE20K / COCO
heads (pixel decoder 256 wide with 6 deformable encoder layers, FFN 1024; transformer decoder
256 wide, 8 heads, FFN 2048, 9 masked-attention layers -- HF's ``decoder_layers`` 10 counts the
prediction before the first --, 100 queries, ``--classes`` 150, the loss at 12544 points), HF's
own initialisation, its weights converted by densevit's converter
(``densevit/checkpoint/mask2former.py``) into densevit's ``Mask2Former`` of the same sizes.

1. Speed (``--device``, one process; on CUDA fp32 without TF32, ``bench_eomt.strict_fp32``).
   The outputs are compared first, in eval mode at
   ``--size`` squared: every prediction set's class and mask logits, the largest difference
   over the largest value (over 1e-4 and the pair is reported and not timed). Then, interleaved
   (``bench_eomt.compare_then_time``: order flipped every repeat, one warm-up each): inference
   (batch 1, no grad; every prediction set's class and mask logits, as both models make them;
   no post-processing) and a training step (batch 2, train mode, the loss of every prediction set,
   backward; the same semantic targets for both, ``bench_eomt.semantic_targets``; each side
   draws its own sampled points; no optimiser). Printed: milliseconds of each and densevit's
   time over HF's (median of per-repeat ratios; the goal is at most 0.8).
2. Peak training memory (each side in a fresh process, the same batch and targets as the
   timed step): the peak resident-set growth (``densevit.utils.memory.peak_rss_growth``) around
   one training step after a warm-up step at 64 x 64 on the CPU; on CUDA
   ``torch.cuda.max_memory_allocated`` over one step after a warm-up step at the size (the
   weights included), and the growth over the allocation before the step.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from bench_eomt import (
    add_common_arguments,
    compare_then_time,
    no_grad,
    run_sections,
    semantic_targets,
    strict_fp32,
    sync,
    synced,
)
from mmengine.registry import DefaultScope

from densevit.checkpoint.mask2former import convert_mask2former, hf_model_cfg
from densevit.registry import MODELS

#: Swin-T (Mask2Former's Swin-T models) and a tiny Swin for --tiny
SWIN = {
    'T': dict(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7),
    'tiny': dict(embed_dim=16, depths=[1, 1, 2, 1], num_heads=[1, 1, 2, 2], window_size=4,
                 mlp_ratio=2.0),
}
HEADS = {
    'T': dict(),  # HF's defaults: the paper's (256 wide, 6 encoder / 10 decoder layers)
    'tiny': dict(feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_layers=1,
                 encoder_feedforward_dim=48, decoder_layers=4, dim_feedforward=48,
                 num_attention_heads=2, train_num_points=64),
}


def hf_model(arch, size, classes, queries, seed=0):
    """HF's Mask2Former of ``arch`` (its own initialisation, seeded)."""
    import transformers
    swin = transformers.SwinConfig(image_size=size, patch_size=4, drop_path_rate=0.0,
                                   out_features=['stage1', 'stage2', 'stage3', 'stage4'],
                                   **SWIN[arch])
    config = transformers.Mask2FormerConfig(backbone_config=swin, num_queries=queries,
                                            num_labels=classes, dropout=0.0, **HEADS[arch])
    torch.manual_seed(seed)
    return transformers.Mask2FormerForUniversalSegmentation(config)


def densevit_cfg(c):
    """densevit's ``Mask2Former`` for the HF config ``c`` (the model
    ``densevit/checkpoint/mask2former.py`` converts HF's files to)."""
    return hf_model_cfg(c)


def densevit_model(hf):
    """densevit's Mask2Former of ``hf``'s sizes, with ``hf``'s weights converted (strictly)."""
    with DefaultScope.overwrite_default_scope('densevit'):
        ours = MODELS.build(densevit_cfg(hf.config))
    ours.load_state_dict(convert_mask2former(hf.state_dict(), strict=True), strict=True)
    return ours


def sides(args):
    """(densevit's model, HF's) on ``args.device``."""
    queries = 10 if args.tiny else args.queries
    hf = hf_model(args.arch, args.size, args.classes, queries)
    ours = densevit_model(hf)
    return ours.to(args.device), hf.to(args.device)


def max_rel_err(ours, hf):
    """The largest |densevit - HF| over the largest |HF| of every prediction set's mask and
    class logits -> (mask, class)."""
    aux = hf.auxiliary_logits
    ref = ([a['masks_queries_logits'] for a in aux] + [hf.masks_queries_logits],
           [a['class_queries_logits'] for a in aux] + [hf.class_queries_logits])
    return tuple(max(((a - b).abs().max() / b.abs().max()).item()
                     for a, b in zip(got, want, strict=True))
                 for got, want in zip((ours['mask_logits'], ours['class_logits']), ref,
                                      strict=True))


def training_batch(args, batch=2):
    """The training step's images and targets (densevit's data samples, HF's mask_labels and
    class_labels), on ``args.device``; the same for every side and process."""
    x = torch.randn(batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(2))
    samples, masks, labels = semantic_targets(batch, args.size, args.classes)
    d = args.device
    return (x.to(d), [s.to(d) for s in samples], [m.to(d) for m in masks],
            [c.to(d) for c in labels])


def train_step(model, batch):
    """A training step of ``model`` (densevit's or HF's: forward, the loss of every prediction
    set, backward) on ``batch``, waiting for the device."""
    x, samples, mask_labels, class_labels = batch
    hf = not hasattr(model, 'decode_head')

    def step():
        if hf:
            loss = model(pixel_values=x, mask_labels=mask_labels, class_labels=class_labels).loss
        else:
            loss = sum(model(x, samples, mode='loss').values())
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync(x.device)
    return step


def speed(args):
    ours, hf = sides(args)
    ours.eval(), hf.eval()
    x = torch.randn(1, 3, args.size, args.size,
                    generator=torch.Generator().manual_seed(1)).to(args.device)
    with torch.no_grad():
        errors = max_rel_err(ours(x, mode='tensor'), hf(pixel_values=x,
                                                        output_auxiliary_logits=True))

    def training():
        ours.train(), hf.train()
        batch = training_batch(args)
        return train_step(ours, batch), train_step(hf, batch)

    return compare_then_time(
        ('eval, every prediction set', 'mask / class', errors),
        (synced(no_grad(ours, x, mode='tensor'), args.device),
         synced(no_grad(hf, pixel_values=x), args.device)),
        training, args.repeats)


def child(args):
    """One side's peak memory over one training step (a fresh process): a JSON line."""
    from densevit.utils.memory import peak_cuda_growth, peak_rss_growth
    side = args.child
    ours, hf = sides(argparse.Namespace(**{**vars(args), 'device': 'cpu'}))
    model = (ours if side == 'densevit' else hf).to(args.device).train()
    del ours, hf
    cuda = torch.device(args.device).type == 'cuda'
    warm = args if cuda else argparse.Namespace(**{**vars(args), 'size': 64})
    train_step(model, training_batch(warm))()  # warm-up: libraries, allocator
    step = train_step(model, training_batch(args))
    if cuda:
        with peak_cuda_growth() as mem:
            start = time.perf_counter()
            step()
            seconds = time.perf_counter() - start
        row = dict(peak_mib=mem.peak_mb, growth_mib=mem.growth_mb)
    else:
        with peak_rss_growth() as mem:
            start = time.perf_counter()
            step()
            seconds = time.perf_counter() - start
        row = dict(growth_mib=mem.growth_mb, reset=mem.reset)
    print(json.dumps(dict(row, side=side, seconds=seconds)))


def memory(args):
    rows = {}
    for side in ('densevit', 'hf'):
        argv = [sys.executable, __file__, '--child', side, '--size', str(args.size),
                '--classes', str(args.classes), '--queries', str(args.queries),
                '--device', args.device] + (['--tiny'] if args.tiny else [])
        out = subprocess.run(argv, capture_output=True, text=True, check=True,
                             env=dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072'))
        rows[side] = row = json.loads(out.stdout.strip().splitlines()[-1])
        peak = f", peak {row['peak_mib']:.1f} MiB" if 'peak_mib' in row else ''
        print(f"training step memory, {side}: +{row['growth_mib']:.1f} MiB{peak}, "
              f"{row['seconds'] * 1e3:.0f} ms")
    rows['densevit_over_hf'] = rows['densevit']['growth_mib'] / max(rows['hf']['growth_mib'],
                                                                   1e-9)
    print(f"densevit / HF training memory {rows['densevit_over_hf']:.2f}")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_common_arguments(p)
    p.add_argument('--queries', type=int, default=100)
    p.add_argument('--device', default='cpu', help='cpu, cuda or cuda:N')
    p.add_argument('--child', choices=['densevit', 'hf'], help=argparse.SUPPRESS)
    args = p.parse_args()
    args.arch = 'T'
    if args.tiny:
        args.arch, args.size, args.classes = 'tiny', 64, 5
    strict_fp32(args.device)
    if args.child:
        return child(args)
    device = (torch.cuda.get_device_name(args.device)
              if torch.device(args.device).type == 'cuda' else 'cpu')
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {device}; '
          f'Mask2Former Swin-{args.arch} at {args.size}x{args.size}, {args.classes} classes')
    run_sections(args, speed, memory)


if __name__ == '__main__':
    main()
