"""Peak memory of a full-resolution ViT training step: activation checkpointing, and windowed
against global attention (ViTDet, Li et al. 2022).

    python benchmarks/bench_vit_train_memory.py [--arch L] [--size 1024] [--batch 1]
        [--variants global global_relpos windowed] [--precisions tf32 bf16] [--repeats 5]
        [--json FILE]
    # the script end to end on the CPU at a small size (times only; no peak memory there):
    python benchmarks/bench_vit_train_memory.py --device cpu --arch B --size 224 --repeats 1

The backbone, random weights, is densevit's ``VisionTransformer`` (``--arch``, patch 16, no
class token, the stride-16 map as output) at ``--size`` squared (1024: a 64 x 64 grid, 4,096
tokens) in three variants:

- ``global``: every block attends globally (absolute positions only: PyTorch's
  scaled-dot-product attention with no mask, its fused kernels on CUDA);
- ``global_relpos``: the same plus decomposed relative positions (MViTv2) in every block: an
  additive bias of heads x N x N per block;
- ``windowed``: ViTDet's backbone: 14 x 14 windows (the grid padded to a multiple of 14) in every
  block but four evenly spaced global ones (ViT-L: 5, 11, 17, 23; ViT-B: 2, 5, 8, 11),
  decomposed relative positions in every block.

Each runs with ``with_cp`` off and on (every block's activations recomputed in the backward).
A training step is forward, ``out.float().pow(2).mean()`` and backward, batch ``--batch``
(train mode; no optimiser, whose state is the same for every variant: AdamW's two moments add
2 x the parameter bytes). Per precision (``tf32``: float32 with TF32 matrix products; ``bf16``:
``torch.autocast`` around the forward and the loss):

- peak memory: ``torch.cuda.max_memory_allocated`` over one step after a reset, the weights, the
  input and the gradients of the step included (the gradients are set to None before it);
- step time: the median of ``--repeats`` steps, the variants' steps interleaved (round robin,
  the order rotated every repeat), so that a slower phase of the machine falls on all of them;
  the ratio to ``global`` without checkpointing is the median of per-repeat ratios.

Rows where a step runs out of memory are kept with ``oom: true``.
"""
import argparse
import statistics
import time

import torch

from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.memory import peak_cuda_growth
from densevit.utils.provenance import add_json_argument, write_result

GLOBAL_BLOCKS = {'Ti': (2, 5, 8, 11), 'S': (2, 5, 8, 11), 'B': (2, 5, 8, 11), 'L': (5, 11, 17, 23), 'H': (7, 15, 23, 31)}


def build(arch, size, variant):
    """The ViT of one variant (module docstring), random weights, train mode."""
    windowed = variant == 'windowed'
    model = VisionTransformer(
        arch=arch, img_size=size, patch_size=16, with_cls_token=False, final_norm=False,
        out_indices=-1, drop_path_rate=0.0, decomposed_rel_pos=variant != 'global',
        window_size=14 if windowed else 0,
        global_attn_indexes=GLOBAL_BLOCKS[arch] if windowed else ())
    return model.train()


def step(model, x, precision, with_cp):
    """One training step (forward, loss, backward); gradients set to None first."""
    model.with_cp = with_cp
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, torch.bfloat16, enabled=precision == 'bf16'):
        out = model(x)
        out = out[-1] if isinstance(out, (tuple, list)) else out
        loss = out.float().pow(2).mean()
    loss.backward()


def sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize()


def peak_mib(model, x, precision, with_cp):
    """Peak allocated MiB over one step (CUDA), or None on the CPU / when out of memory."""
    if x.device.type != 'cuda':
        step(model, x, precision, with_cp)
        return None
    with peak_cuda_growth(x.device) as mem:
        step(model, x, precision, with_cp)
    return mem.peak_mb


def measure(args, device):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    models = {v: build(args.arch, args.size, v).to(device) for v in args.variants}
    params = sum(p.numel() for p in next(iter(models.values())).parameters())
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    rows = []
    for precision in args.precisions:
        cases = [(v, cp) for v in args.variants for cp in (False, True)]
        live = []
        for variant, cp in cases:
            row = dict(variant=variant, with_cp=cp, precision=precision, arch=args.arch,
                       size=args.size, batch=args.batch, params=params)
            try:
                step(models[variant], x, precision, cp)  # warm-up (kernels, allocator)
                row['peak_mib'] = peak_mib(models[variant], x, precision, cp)
                live.append((variant, cp))
            except torch.OutOfMemoryError:
                row['oom'] = True
            models[variant].zero_grad(set_to_none=True)
            if device.type == 'cuda':
                torch.cuda.empty_cache()
            rows.append(row)
            print(f'{precision} {variant:14s} with_cp={cp!s:5s} peak '
                  + ('OOM' if row.get('oom') else f"{row['peak_mib'] or 0:,.0f} MiB"), flush=True)
        times = {c: [] for c in live}
        for r in range(args.repeats):
            order = live[r % len(live):] + live[:r % len(live)]
            for variant, cp in order:
                sync(device)
                t0 = time.perf_counter()
                step(models[variant], x, precision, cp)
                sync(device)
                times[(variant, cp)].append(time.perf_counter() - t0)
        base = times.get((args.variants[0], False))
        for row in rows:
            key = (row['variant'], row['with_cp'])
            if row['precision'] != precision or key not in times:
                continue
            row['step_s'] = statistics.median(times[key])
            if base:
                row['time_vs_first'] = statistics.median(
                    t / b for t, b in zip(times[key], base, strict=True))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--arch', default='L', choices=sorted(GLOBAL_BLOCKS))
    p.add_argument('--size', type=int, default=1024)
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--variants', nargs='+', default=['global', 'global_relpos', 'windowed'],
                   choices=['global', 'global_relpos', 'windowed'])
    p.add_argument('--precisions', nargs='+', default=['tf32', 'bf16'], choices=['tf32', 'bf16'])
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    add_json_argument(p)
    args = p.parse_args()
    device = torch.device(args.device)
    rows = measure(args, device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    print(f'\nViT-{args.arch}/16 {args.size}x{args.size}, batch {args.batch}, {name}, '
          f'torch {torch.__version__}')
    print(f"{'precision':9s} {'variant':14s} {'with_cp':7s} {'peak MiB':>9s} {'step s':>7s} "
          f"{'x first':>7s}")
    for r in rows:
        peak = 'OOM' if r.get('oom') else (f"{r['peak_mib']:,.0f}" if r['peak_mib'] else '-')
        step_s = f"{r['step_s']:.3f}" if 'step_s' in r else '-'
        ratio = f"{r['time_vs_first']:.2f}" if 'time_vs_first' in r else '-'
        print(f"{r['precision']:9s} {r['variant']:14s} {r['with_cp']!s:7s} {peak:>9s} "
              f"{step_s:>7s} {ratio:>7s}")
    if args.json:
        write_result(args.json, rows, device=name, torch=torch.__version__)


if __name__ == '__main__':
    main()
