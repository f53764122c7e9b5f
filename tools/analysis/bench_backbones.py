"""Backbone speed and memory against HF transformers, on the same weights, in one run.

    python tools/analysis/bench_backbones.py [--repeats 5]

1. Latency: densevit ViT-B/16 at 224² and 512² vs HF ``ViTModel``; Swin-T at 224² vs HF
   ``SwinModel`` (HF weights converted into densevit; batch 1, forward, no grad).
2. Relative-position ViT-B/16: forward time vs the plain ViT at 224².

(Peak memory against token count is not measured here yet: the process's ru_maxrss
high-water mark is set by building the model, not by the forward.)
"""
import argparse
import statistics
import time

import torch

from densevit.models.backbones.swin import SwinTransformer
from densevit.models.backbones.swin_convert import convert_swin
from densevit.models.backbones.vit import VisionTransformer
from densevit.models.backbones.vit_convert import convert_vit


def timed(fn, x, repeats):
    with torch.no_grad():
        fn(x)  # warm-up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


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
    args = p.parse_args()
    torch.manual_seed(0)
    print(f'torch threads: {torch.get_num_threads()}')
    print('| model | input | densevit (ms) | HF transformers (ms) | HF / densevit |')
    print('|---|---|---|---|---|')
    for size in (224, 512):
        ours, hf = vit_pair(size)
        x = torch.randn(1, 3, size, size)
        a, b = timed(ours, x, args.repeats), timed(hf, x, args.repeats)
        print(f'| ViT-B/16 | {size}² | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |')
    ours, hf = swin_pair()
    x = torch.randn(1, 3, 224, 224)
    a, b = timed(ours, x, args.repeats), timed(lambda t: hf(pixel_values=t), x, args.repeats)
    print(f'| Swin-T | 224² | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |')

    plain = VisionTransformer(arch='B', img_size=224).eval()
    rel = VisionTransformer(arch='B', img_size=224,
                            pos_embed=dict(type='relative', placement='every_layer')).eval()
    x = torch.randn(1, 3, 224, 224)
    a, b = timed(plain, x, args.repeats), timed(rel, x, args.repeats)
    print(f'\nrelative-position ViT-B/16 forward at 224²: {b * 1e3:.1f} ms vs plain '
          f'{a * 1e3:.1f} ms = {b / a:.2f}x')


if __name__ == '__main__':
    main()
