"""BoxRPB's hand-written backward against plain autograd, in a DETR-on-ViT training step.

    python benchmarks/bench_box_rpb.py [CONFIG] [--steps 20] [--threads 1] [--json FILE]

CONFIG (default ``configs/quickstart/detr_vit_shapes.py``) is built twice with the same
random initialisation and optimiser (``bench_train_steps.build``). In one copy every
``BoxRelativePositionBias`` runs its offset MLPs through autograd (``mlp_x(dx)``, the bias
added per axis and permuted: how BoxRPB was written before
:class:`~densevit.models.layers.box_rpb._OffsetMLP`); the other runs densevit's module as it
is. Both take the same batch, one ``train_step`` at a time, the order swapped every round.
Before timing, three steps of each are compared: the losses and every parameter after the
optimiser update must be equal bit for bit (else exit code 1: a faster step that trains
another model is no speed-up). Printed: the median step of each and the median of the
per-round time ratios (densevit / autograd).
"""
import argparse
import copy
import statistics
import sys
import time
import types
from pathlib import Path

import torch

from densevit.models.layers.box_rpb import BoxRelativePositionBias, box_pixel_offsets
from densevit.utils.provenance import add_json_argument, write_result
from densevit.utils.script_module import load_script

# benchmarks/bench_train_steps.py as a module (benchmarks/ is not a package): its ``build``
# makes both models here
build = load_script(Path(__file__).resolve().parent / 'bench_train_steps.py').build


def autograd_forward(self, boxes, size):
    """BoxRPB by autograd alone: [B, heads, Q, H·W], the module's contract."""
    dx, dy = box_pixel_offsets(boxes, size, self.stride, self.mode)
    bx, by = self.mlp_x(dx), self.mlp_y(dy)  # [B, Q, W, heads], [B, Q, H, heads]
    bias = by[:, :, :, None, :] + bx[:, :, None, :, :]  # [B, Q, H, W, heads]
    return bias.flatten(2, 3).permute(0, 3, 1, 2)


def with_autograd_box_rpb(model):
    """``model`` with every BoxRPB module's forward replaced by :func:`autograd_forward`;
    returns how many were replaced."""
    found = [m for m in model.modules() if isinstance(m, BoxRelativePositionBias)]
    for m in found:
        m.forward = types.MethodType(autograd_forward, m)
    return len(found)


def step(run, batch, seed):
    model, optim = run
    torch.manual_seed(seed)
    return model.train_step(copy.deepcopy(batch), optim)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('config', nargs='?', default='configs/quickstart/detr_vit_shapes.py')
    p.add_argument('--steps', type=int, default=20, help='timed steps of each (default 20)')
    p.add_argument('--threads', type=int, help="torch threads (default: torch's)")
    add_json_argument(p)
    args = p.parse_args(argv)
    if not Path(args.config).is_file():
        p.error(f'no such config: {args.config}')
    if args.steps < 1:
        p.error(f'--steps must be at least 1, got {args.steps}')
    if args.threads:
        torch.set_num_threads(args.threads)
    ours_model, ours_optim, batch = build(args.config)
    ref_model, ref_optim, _ = build(args.config)
    if not with_autograd_box_rpb(ref_model):
        p.error(f'{args.config}: its model has no BoxRPB (bbox_head.box_rpb)')
    ours, ref = (ours_model, ours_optim), (ref_model, ref_optim)

    for s in range(3):  # the same numbers first (also the warm-up)
        a, b = step(ours, batch, s), step(ref, batch, s)
        losses_equal = all(torch.equal(a[k], b[k]) for k in a)
        params_equal = all(torch.equal(x, y) for x, y in
                           zip(ours_model.parameters(), ref_model.parameters(), strict=True))
        if not (losses_equal and params_equal):
            print(f'step {s}: losses equal {losses_equal}, parameters equal {params_equal}: '
                  'the two do not train the same model', file=sys.stderr)
            return 1
    print('3 steps: losses and parameters equal bit for bit')

    times = {'densevit': [], 'autograd': []}
    for r in range(args.steps):
        order = [('densevit', ours), ('autograd', ref)]
        for name, run in (order if r % 2 == 0 else order[::-1]):
            t = time.perf_counter()
            step(run, batch, 3 + r)
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    ratio = statistics.median(a / b for a, b in zip(times['densevit'], times['autograd'],
                                                    strict=True))
    n = len(batch['inputs'])
    print(f'torch {torch.__version__}, threads {torch.get_num_threads()}, {args.steps} steps '
          f'each, batch {n}')
    print('| BoxRPB backward | step (ms) |')
    print('|---|---|')
    for k, v in med.items():
        print(f'| {k} | {v:.0f} |')
    print(f'densevit / autograd time: {ratio:.2f} (median of per-round ratios)')
    if args.json:
        write_result(args.json, dict(config=args.config, batch=n, step_ms=med,
                                     densevit_over_autograd=ratio, equal_bit_for_bit=True),
                     steps=args.steps)
    return 0


if __name__ == '__main__':
    sys.exit(main())
