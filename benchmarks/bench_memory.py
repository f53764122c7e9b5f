"""Peak CPU memory of single forward passes: ViT-B/16 against its token count
and SegFormer-B0 slide inference against one window.

    OMP_NUM_THREADS=1 python benchmarks/bench_memory.py [--vit-sizes 1024 2048]
        [--seg-shape 512 2048] [--only control vit seg] [--glibc-default-malloc] [--json FILE]

Each measurement runs in a fresh process: build the model (random weights), one
warm-up forward, then :func:`densevit.utils.memory.peak_rss_growth` around one forward
pass (batch 1, no grad). The figure is how far that forward pushed the resident set
above its level just before it (weights and input already resident; the high-water
mark left by building the model is reset first). Resident memory, not tensor bytes:
allocator overhead included. A control allocates and fills a 400 MiB tensor the same
way; it must read about 400 MiB.

The measuring processes run with ``MALLOC_MMAP_THRESHOLD_=131072``: glibc's initial
threshold, but fixed, so that every tensor above 128 KiB gets its own mapping, returned
to the system when freed. By default glibc raises the threshold up to 32 MiB as large
blocks are freed; tensors below it then come from the heap, which keeps freed blocks
resident, and the peak depends on how such blocks happen to fit (ViT-B at 1024²:
1.3-1.6x the fixed-threshold figure, varying between runs; at 2048², whose tensors all
exceed 32 MiB, the same). ``--glibc-default-malloc`` measures with glibc's default behaviour instead.

1. ViT-B/16: ``VisionTransformer(arch='B', img_size=S, patch_size=16)`` (class token,
   SDPA attention), S x S input for each ``--vit-sizes``, warm-up at 224². Printed
   beside each: N = (S/16)² + 1 tokens and what one N x N attention matrix would take
   (12 heads x N² x 4 bytes); then, between consecutive sizes, the ratio of the peak
   growths against the ratio of token counts and the growth per added token (linear
   memory: the same per-token cost between any two sizes; N x N would rise with N).
2. SegFormer-B0 (``configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py``,
   150 classes) with ``test_cfg=dict(mode='slide', crop_size=(512, 512),
   stride=(341, 341))`` (the ADE20K slide setting of the SETR configs; the SegFormer
   config itself infers 'whole'): ``EncoderDecoder.inference`` of one 512 x 512 window
   (mode 'whole') vs slide inference of a ``--seg-shape`` image (512 x 2048: 6 windows),
   warm-up one 512 x 512 forward. Printed: the backbone's batch size per call and the
   output-sized accumulator (logits [1, 150, H, W] plus counts, float32) that slide
   inference needs whatever the window count; slide peak minus accumulator should be
   about one window's peak.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from densevit.utils.memory import peak_rss_growth
from densevit.utils.provenance import add_json_argument, write_result

REPO = Path(__file__).resolve().parents[1]
SEG_CONFIG = REPO / 'configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
SLIDE_CFG = dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
CONTROL_MIB = 400
FIXED_MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, pinned


def measure(fn):
    """Peak RSS growth (MiB) and seconds of one call of ``fn`` under no_grad."""
    with torch.no_grad(), peak_rss_growth() as mem:
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
    return dict(growth_mib=mem.growth_mb, baseline_mib=mem.baseline_mb, seconds=seconds,
                reset=mem.reset)


def run_control():
    return measure(lambda: torch.ones(CONTROL_MIB * 2 ** 20 // 4))


def run_vit(size, warmup_size=224):
    from densevit.models.backbones.vit import VisionTransformer
    model = VisionTransformer(arch='B', img_size=size, patch_size=16).eval()
    with torch.no_grad():
        model(torch.randn(1, 3, warmup_size, warmup_size))
    x = torch.randn(1, 3, size, size)
    result = measure(lambda: model(x))
    tokens = (size // 16) ** 2 + model.num_extra_tokens
    result.update(size=size, tokens=tokens,
                  attn_matrix_mib=model.blocks[0].attn.num_heads * tokens ** 2 * 4 / 2 ** 20)
    return result


def run_seg(mode, height, width):
    from densevit.apis import init_model
    model = init_model(SEG_CONFIG, cfg_options={'model.test_cfg': SLIDE_CFG})
    model.test_cfg['mode'] = mode
    with torch.no_grad():
        model.inference(torch.randn(1, 3, 512, 512), None)
    calls = []
    model.backbone.register_forward_pre_hook(lambda m, args: calls.append(len(args[0])))
    x = torch.randn(1, 3, height, width)
    result = measure(lambda: model.inference(x, None))
    classes = model.decode_head.num_classes
    result.update(mode=mode, shape=[height, width], backbone_batches=calls,
                  accumulator_mib=(classes + 1) * height * width * 4 / 2 ** 20)
    return result


def child(argv):
    kind, *rest = argv
    if kind == 'control':
        result = run_control()
    elif kind == 'vit':
        result = run_vit(int(rest[0]))
    else:
        result = run_seg(rest[0], int(rest[1]), int(rest[2]))
    print(json.dumps(result))


def in_fresh_process(args, *child_args):
    env = dict(os.environ)
    if not args.glibc_default_malloc:
        env['MALLOC_MMAP_THRESHOLD_'] = str(FIXED_MMAP_THRESHOLD)
    out = subprocess.run([sys.executable, __file__, '--child', *map(str, child_args)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(args):
    malloc = ('glibc default' if args.glibc_default_malloc
              else f'MALLOC_MMAP_THRESHOLD_={FIXED_MMAP_THRESHOLD}')
    results = dict(malloc=malloc)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {malloc}; peak RSS '
          f'growth of one forward, MiB')
    if 'control' in args.only:
        r = results['control'] = in_fresh_process(args, 'control')
        print(f'control: torch.ones of {CONTROL_MIB} MiB -> {r["growth_mib"]:.1f} MiB '
              f'(high-water mark reset: {r["reset"]})')
    if 'vit' in args.only:
        vit = results['vit'] = [in_fresh_process(args, 'vit', s) for s in args.vit_sizes]
        for r in vit:
            print(f'ViT-B/16 {r["size"]}x{r["size"]}: {r["tokens"]} tokens, peak +'
                  f'{r["growth_mib"]:.1f} MiB ({r["seconds"]:.1f} s); one 12 x N x N '
                  f'float32 attention matrix would be {r["attn_matrix_mib"]:.1f} MiB')
        by_size = sorted(vit, key=lambda r: r['size'])
        for a, b in zip(by_size, by_size[1:], strict=False):  # consecutive pairs
            tokens = b['tokens'] / a['tokens']
            per_token = (b['growth_mib'] - a['growth_mib']) * 1024 / (b['tokens'] - a['tokens'])
            print(f'ViT-B/16 {a["size"]}² -> {b["size"]}²: peak growth '
                  f'x{b["growth_mib"] / a["growth_mib"]:.2f}, tokens x{tokens:.2f}, N x N matrix '
                  f'x{tokens ** 2:.2f}; {per_token:.1f} KiB more per added token')
    if 'seg' in args.only:
        h, w = args.seg_shape
        whole = in_fresh_process(args, 'seg', 'whole', 512, 512)
        slide = in_fresh_process(args, 'seg', 'slide', h, w)
        results['seg'] = dict(whole=whole, slide=slide)
        print(f'SegFormer-B0 whole 512x512: peak +{whole["growth_mib"]:.1f} MiB '
              f'({whole["seconds"]:.1f} s)')
        extra = slide['growth_mib'] - slide['accumulator_mib']
        print(f'SegFormer-B0 slide {h}x{w}: {len(slide["backbone_batches"])} backbone calls '
              f'of batch {sorted(set(slide["backbone_batches"]))}, peak '
              f'+{slide["growth_mib"]:.1f} MiB ({slide["seconds"]:.1f} s) = accumulator '
              f'{slide["accumulator_mib"]:.1f} MiB + {extra:.1f} MiB '
              f'({extra / whole["growth_mib"]:.2f} x one window\'s peak)')
    if args.json:
        write_result(args.json, results)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--only', nargs='+', choices=['control', 'vit', 'seg'],
                   default=['control', 'vit', 'seg'])
    p.add_argument('--vit-sizes', type=int, nargs='+', default=[1024, 2048])
    p.add_argument('--seg-shape', type=int, nargs=2, default=[512, 2048], metavar=('H', 'W'))
    p.add_argument('--glibc-default-malloc', action='store_true',
                   help="leave glibc's dynamic mmap threshold (see above)")
    add_json_argument(p)
    p.add_argument('--child', nargs='+', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    return report(args)


if __name__ == '__main__':
    sys.exit(main())
