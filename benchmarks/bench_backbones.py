"""Backbone speed against HF transformers, on the same weights, in one run.

    OMP_NUM_THREADS=1 python benchmarks/bench_backbones.py [--repeats 5] [--json FILE]

1. Latency: densevit ViT-B/16 at 224² and 512² vs HF ``ViTModel``; Swin-T at 224² vs HF
   ``SwinModel`` (HF weights converted into densevit; batch 1, forward, no grad).
2. Relative-position ViT-B/16: forward time vs the plain ViT at 224².

Times are medians of ``--repeats`` forwards per model after one warm-up each, the two
models' forwards interleaved (order flipped every repeat) so that load from other
processes falls on both sides; the ratio is the median of the per-repeat ratios of
adjacent forwards. On a shared machine pin the process to one core (``taskset -c 1``)
and compare ratios, not milliseconds, between runs.

The Swin comparison is not exactly the same work: HF ``SwinModel`` turns off the shift
of a stage whose map fits in one window (the last, 7x7, stage at 224²), densevit keeps
the shifted window and its mask there (as the detection backbones do), and also
normalises every stage output (four output norms, not one).

``--json FILE`` writes the printed times and ratios with the command, commit, CPU and thread
count (``densevit.utils.provenance``).

(Peak memory against token count is not measured here yet: the process's ru_maxrss
high-water mark is set by building the model, not by the forward.)
"""
import argparse
import statistics
import time

import torch

from densevit.checkpoint.swin import convert_swin
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.swin import SwinTransformer
from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.provenance import add_json_argument, write_result


def timed(fn_a, fn_b, x, repeats, grad=False):
    """Forward times of two models, their runs interleaved (A B, then B A, ...).

    Timing one model's repeats and then the other's lets load from other processes
    (which drifts over seconds) fall on one side of the ratio; interleaving, with the
    order flipped every repeat, gives both the same share of it, and the ratio of each
    adjacent pair cancels what drifts slower than one pair.

    ``grad=True`` runs them with autograd on (training steps), else under ``no_grad``.

    Returns:
        (median seconds of A, median seconds of B, median of the per-repeat B / A).
    """
    times = ([], [])
    with torch.set_grad_enabled(grad):
        fn_a(x)  # warm-up
        fn_b(x)
        for r in range(repeats):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                t = time.perf_counter()
                (fn_a, fn_b)[i](x)
                times[i].append(time.perf_counter() - t)
    ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
    return statistics.median(times[0]), statistics.median(times[1]), ratio


def vit_pair(size):
    from transformers import ViTConfig, ViTModel
    hf = ViTModel(ViTConfig(image_size=size, layer_norm_eps=1e-6), add_pooling_layer=False).eval()
    ours = VisionTransformer(arch='B', img_size=size, patch_size=16).eval()
    ours.load_state_dict(convert_vit(hf.state_dict()), strict=True)
    return ours, lambda x: hf(pixel_values=x, interpolate_pos_encoding=False)


def swin_pair():
    from transformers import SwinConfig, SwinModel
    hf = SwinModel(SwinConfig(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
                              window_size=7, image_size=224)).eval()
    ours = SwinTransformer(arch='tiny', drop_path_rate=0.0).eval()
    missing, unexpected = ours.load_state_dict(convert_swin(hf.state_dict()), strict=False)
    assert not unexpected and all(k.startswith('norm') for k in missing), (missing, unexpected)
    return ours, hf


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--repeats', type=int, default=5)
    add_json_argument(p)
    args = p.parse_args()
    torch.manual_seed(0)
    print(f'torch threads: {torch.get_num_threads()}')
    print('| model | input | densevit (ms) | HF transformers (ms) | HF / densevit |')
    print('|---|---|---|---|---|')
    rows = []

    def row(model, size, a, b, ratio):
        rows.append(dict(model=model, input=size, densevit_ms=a * 1e3, hf_ms=b * 1e3,
                         hf_over_densevit=ratio))
        print(f'| {model} | {size}² | {a * 1e3:.1f} | {b * 1e3:.1f} | {ratio:.2f} |')

    for size in (224, 512):
        ours, hf = vit_pair(size)
        x = torch.randn(1, 3, size, size)
        row('ViT-B/16', size, *timed(ours, hf, x, args.repeats))
    ours, hf = swin_pair()
    x = torch.randn(1, 3, 224, 224)
    row('Swin-T', 224, *timed(ours, lambda t: hf(pixel_values=t), x, args.repeats))

    plain = VisionTransformer(arch='B', img_size=224).eval()
    rel = VisionTransformer(arch='B', img_size=224,
                            pos_embed=dict(type='relative', placement='every_layer')).eval()
    x = torch.randn(1, 3, 224, 224)
    a, b, ratio = timed(plain, rel, x, args.repeats)
    print(f'\nrelative-position ViT-B/16 forward at 224²: {b * 1e3:.1f} ms vs plain '
          f'{a * 1e3:.1f} ms = {ratio:.2f}x')
    if args.json:
        write_result(args.json, dict(vs_hf=rows, relative_position=dict(
            input=224, plain_ms=a * 1e3, relative_ms=b * 1e3, relative_over_plain=ratio)),
            repeats=args.repeats)


if __name__ == '__main__':
    main()
