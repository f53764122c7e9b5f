"""EoMT against HF transformers on the same weights, and the memory of its mask losses.

    OMP_NUM_THREADS=1 python benchmarks/bench_eomt.py [--arch S] [--size 512] [--repeats 5]
        [--only speed memory] [--device cpu|cuda] [--json FILE]
    # end to end at a tiny size (what tests/tools runs; a check, not a measurement):
    python benchmarks/bench_eomt.py --tiny --repeats 1

1. Speed. HF's ``EomtForUniversalSegmentation`` (``--arch`` S: width 384, 12 layers, 6 heads;
   B: 768 / 12 / 12; patch 16, 4 registers, queries in the last 4 blocks, 100 queries, 150
   classes, ``--size`` squared input), its weights converted by densevit's converter into
   densevit's ``EoMT``. The outputs are compared first, in eval mode with both models'
   masking probabilities at 0 (a trained model's): the class and mask logits' largest
   difference over the largest value (over 1e-4 and the pair is not timed). Then, interleaved
   (order flipped every repeat, after one warm-up each): inference (batch 1, no grad; the
   class and mask logits, no post-processing) and a training step (batch 2, train mode,
   masking probability 1 in every block as at the start of training, the Mask2Former loss of
   every block at 12544 points, backward; the same semantic targets for both; no optimiser).
   Printed: milliseconds of each and densevit's time over HF's (median of per-repeat ratios).
   ``--device cuda``: both models, inputs and targets on the GPU, each timed call waiting for
   it, in fp32 without TF32 (``strict_fp32``).
2. Memory of the mask losses (each in a fresh process, its peak resident-set growth,
   ``densevit.utils.memory.peak_rss_growth``, around one loss and its backward): densevit's
   ``MaskSetCriterion`` (matching and losses at 12544 sampled points, EoMT's and
   Mask2Former's) against the same Hungarian-matched BCE + dice computed on full-resolution
   masks (the mask logits upsampled bilinearly to the input, every pixel a point: what
   point sampling replaces), for one image of 100 queries, 150 classes and 20 targets,
   mask logits at a quarter of the input.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.checkpoint.eomt import convert_eomt
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.provenance import add_json_argument, write_result

ARCHS = {'S': (384, 12, 6), 'B': (768, 12, 12), 'tiny': (32, 4, 2)}


def hf_model(arch, size, classes, queries, blocks):
    import transformers
    width, depth, heads = ARCHS[arch]
    config = transformers.EomtConfig(
        hidden_size=width, num_hidden_layers=depth, num_attention_heads=heads,
        image_size=size, patch_size=16, num_register_tokens=4, num_blocks=blocks,
        num_queries=queries, num_labels=classes)
    return transformers.EomtForUniversalSegmentation(config)


def densevit_model(hf):
    """densevit's EoMT of ``hf``'s sizes, with ``hf``'s weights converted."""
    c = hf.config
    cfg = dict(
        type='EoMT', num_queries=c.num_queries, num_blocks=c.num_blocks,
        backbone=dict(type='VisionTransformer', img_size=c.image_size, patch_size=c.patch_size,
                      arch=dict(embed_dims=c.hidden_size, num_layers=c.num_hidden_layers,
                                num_heads=c.num_attention_heads,
                                feedforward_channels=c.hidden_size * c.mlp_ratio),
                      num_register_tokens=c.num_register_tokens, layer_scale_init_value=1.0),
        decode_head=dict(type='EoMTHead', num_classes=c.num_labels,
                         num_upscale_blocks=c.num_upscale_blocks))
    with DefaultScope.overwrite_default_scope('densevit'):
        ours = MODELS.build(cfg)
    ours.load_state_dict(convert_eomt(hf.state_dict(), strict=True), strict=True)
    return ours


def set_probs(model, value):
    with torch.no_grad():
        model.attn_mask_probs.fill_(value)


def semantic_targets(batch, size, classes, seed=0):
    """Random class maps (a few rectangles of random classes on a background class) as
    densevit data samples and HF's mask_labels / class_labels."""
    g = torch.Generator().manual_seed(seed)
    samples, masks, labels = [], [], []
    for _ in range(batch):
        seg = torch.zeros(size, size, dtype=torch.long)
        for _ in range(6):
            y, x = torch.randint(0, size // 2, (2,), generator=g).tolist()
            h, w = torch.randint(size // 8, size // 2, (2,), generator=g).tolist()
            seg[y:y + h, x:x + w] = torch.randint(1, classes, (1,), generator=g).item()
        present = seg.unique()
        samples.append(DataSample(gt_sem_seg=PixelData(data=seg[None]), metainfo=dict(
            img_shape=(size, size), ori_shape=(size, size))))
        masks.append((seg[None] == present[:, None, None]).float())
        labels.append(present)
    return samples, masks, labels


def timed(fn_a, fn_b, repeats):
    """Median seconds of each and the median of per-repeat b / a; calls interleaved, the
    order flipped every repeat, one warm-up call each."""
    fn_a(), fn_b()
    times = ([], [])
    for r in range(repeats):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            (fn_a, fn_b)[i]()
            times[i].append(time.perf_counter() - t)
    ratio = statistics.median(a / b for a, b in zip(*times, strict=True))
    return statistics.median(times[0]), statistics.median(times[1]), ratio


def sync(device):
    """Wait for ``device`` (a CUDA device; nothing to wait for on the CPU)."""
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def strict_fp32(device):
    """On CUDA, fp32 matrix products and convolutions without TF32 (cuDNN's convolutions use it
    by default): otherwise the two sides' outputs differ by TF32's rounding, not their math."""
    if torch.device(device).type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def synced(fn, device):
    """``fn`` as a function of nothing that returns once ``device`` has finished its work."""
    def call():
        fn()
        sync(device)
    return call


def speed(args):
    torch.manual_seed(0)
    d = args.device
    strict_fp32(d)
    queries = 10 if args.tiny else 100
    hf = hf_model(args.arch, args.size, args.classes, queries, blocks=2 if args.tiny else 4)
    ours = densevit_model(hf).to(d)
    hf = hf.to(d)
    hf.eval(), ours.eval()
    set_probs(hf, 0.0), set_probs(ours, 0.0)
    x = torch.randn(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(1)).to(d)
    with torch.no_grad():
        out = hf(pixel_values=x)
        masks, classes = ours.predictions(x, masked=False)
    errors = [((a - b).abs().max() / b.abs().max()).item() for a, b in (
        (classes[-1], out.class_queries_logits), (masks[-1], out.masks_queries_logits))]

    def training():
        hf.train(), ours.train()
        set_probs(hf, 1.0), set_probs(ours, 1.0)
        xb = torch.randn(2, 3, args.size, args.size,
                         generator=torch.Generator().manual_seed(2)).to(d)
        samples, mask_labels, class_labels = semantic_targets(2, args.size, args.classes)
        samples = [s.to(d) for s in samples]
        mask_labels = [m.to(d) for m in mask_labels]
        class_labels = [c.to(d) for c in class_labels]

        def train_ours():
            losses = ours(xb, samples, mode='loss')
            sum(losses.values()).backward()
            ours.zero_grad(set_to_none=True)

        def train_hf():
            hf(pixel_values=xb, mask_labels=mask_labels, class_labels=class_labels).loss.backward()
            hf.zero_grad(set_to_none=True)
        return synced(train_ours, d), synced(train_hf, d)

    return compare_then_time(
        ('eval, masking off', 'class / mask', errors),
        (synced(no_grad(ours.predictions, x, masked=False), d),
         synced(no_grad(hf, pixel_values=x), d)), training, args.repeats)


def no_grad(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` under ``torch.no_grad`` as a function of nothing."""
    def call():
        with torch.no_grad():
            fn(*args, **kwargs)
    return call


def compare_then_time(compared, inference, training, repeats):
    """The speed rows of a densevit / HF pair: the outputs' differences printed, then, unless
    one is over 1e-4, inference (the pair of functions ``inference``) and a training step (the
    pair ``training()`` returns; called once inference is timed) timed interleaved.

    Args:
        compared: (what was compared, the outputs' names, their max differences over max).
    """
    label, names, errors = compared
    print(f'outputs ({label}): {names} logits max difference over max '
          + ' / '.join(f'{e:.1e}' for e in errors))
    rows = dict(max_rel_err=max(errors))
    if max(errors) > 1e-4:
        print('not the same function: not timed')
        return rows
    for key, what, pair in (('inference', 'inference, batch 1', lambda: inference),
                            ('training', 'training step, batch 2', training)):
        a, b, ratio = timed(*pair(), repeats)
        rows[key] = dict(densevit_ms=a * 1e3, hf_ms=b * 1e3, densevit_over_hf=ratio)
        print(f'{what}: densevit {a * 1e3:.1f} ms, HF {b * 1e3:.1f} ms, '
              f'densevit / HF {ratio:.2f}')
    return rows


def loss_inputs(size, classes, queries=100, targets=20, seed=0):
    """One image: mask logits [1, Q, size/4, size/4], class logits [1, Q, K+1], and ``targets``
    random rectangle masks at full resolution with their classes."""
    g = torch.Generator().manual_seed(seed)
    q = size // 4
    mask_logits = torch.randn(1, queries, q, q, generator=g, requires_grad=True)
    class_logits = torch.randn(1, queries, classes + 1, generator=g, requires_grad=True)
    masks = torch.zeros(targets, size, size)
    for i in range(targets):
        y, x = torch.randint(0, size // 2, (2,), generator=g).tolist()
        masks[i, y:y + size // 3, x:x + size // 4] = 1
    labels = torch.randint(0, classes, (targets,), generator=g)
    return mask_logits, class_logits, [dict(labels=labels, masks=masks)]


def point_loss(size, classes):
    from densevit.models.losses.mask_criterion import MaskSetCriterion
    mask_logits, class_logits, targets = loss_inputs(size, classes)
    losses = MaskSetCriterion(num_classes=classes)(mask_logits, class_logits, targets, 20.0)
    sum(losses.values()).backward()


def full_resolution_loss(size, classes):
    """The same matching and losses with every pixel of the upsampled masks a point."""
    from scipy.optimize import linear_sum_assignment

    from densevit.models.losses.point_loss import dice_score_loss, pairwise_mask_costs, sigmoid_bce
    mask_logits, class_logits, targets = loss_inputs(size, classes)
    full = F.interpolate(mask_logits, size=(size, size), mode='bilinear',
                         align_corners=False)[0].flatten(1)  # [Q, H W]
    target = targets[0]['masks'].flatten(1)  # [N, H W]
    labels = targets[0]['labels']
    with torch.no_grad():
        bce, dice = pairwise_mask_costs(full, target)
        prob = class_logits[0].softmax(-1)[:, labels]
        q, t = linear_sum_assignment((5 * bce + 5 * dice - 2 * prob).numpy())
    loss = (sigmoid_bce(full[q], target[t]).mean(1).sum() + dice_score_loss(
        full[q].sigmoid(), target[t]).sum()) / len(t)
    no_object = torch.full((class_logits.shape[1],), classes)
    no_object[q] = labels[t]
    weight = torch.ones(classes + 1)
    weight[-1] = 0.1
    (loss + F.cross_entropy(class_logits[0], no_object, weight)).backward()


def child(kind, size, classes):
    from densevit.utils.memory import peak_rss_growth
    fn = point_loss if kind == 'points' else full_resolution_loss
    fn(64, classes)  # warm-up at a small size: libraries and allocator
    with peak_rss_growth() as mem:
        start = time.perf_counter()
        fn(size, classes)
        seconds = time.perf_counter() - start
    print(json.dumps(dict(kind=kind, growth_mib=mem.growth_mb, seconds=seconds,
                          reset=mem.reset)))


def memory(args):
    rows = {}
    for kind in ('points', 'full_resolution'):
        out = subprocess.run([sys.executable, __file__, '--child', kind, str(args.size),
                              str(args.classes)], capture_output=True, text=True, check=True,
                             env=dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072'))
        rows[kind] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"mask losses, {kind.replace('_', ' ')}: peak +{rows[kind]['growth_mib']:.1f} MiB, "
              f"{rows[kind]['seconds'] * 1e3:.0f} ms")
    return rows


def add_common_arguments(p):
    """The arguments of this benchmark that ``bench_mask2former.py`` shares: ``--size``,
    ``--classes``, ``--repeats``, ``--only speed memory``, ``--tiny``, ``--json``."""
    p.add_argument('--size', type=int, default=512)
    p.add_argument('--classes', type=int, default=150)
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--only', nargs='+', choices=['speed', 'memory'], default=['speed', 'memory'])
    p.add_argument('--tiny', action='store_true', help='a tiny model at 64x64 (a check)')
    add_json_argument(p)


def run_sections(args, speed, memory):
    """``speed(args)`` and ``memory(args)`` as ``--only`` asks, their results written to
    ``--json``."""
    sections = dict(speed=speed, memory=memory)
    results = {name: sections[name](args) for name in sections if name in args.only}
    if args.json:
        write_result(args.json, results)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--arch', default='S', choices=['S', 'B'])
    add_common_arguments(p)
    p.add_argument('--device', default='cpu', help='cpu, cuda or cuda:N (speed only)')
    p.add_argument('--child', nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), int(args.child[2]))
    if args.tiny:
        args.arch, args.size, args.classes = 'tiny', 64, 5
    device = (torch.cuda.get_device_name(args.device)
              if torch.device(args.device).type == 'cuda' else 'cpu')
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {device}; '
          f'EoMT-{args.arch}/16 at {args.size}x{args.size}, {args.classes} classes')
    run_sections(args, speed, memory)


if __name__ == '__main__':
    main()
