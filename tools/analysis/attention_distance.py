"""Mean attention distance per layer and head (ViT paper, Fig. 7 right / Fig. 11).

    python tools/analysis/attention_distance.py CONFIG CHECKPOINT [IMAGES...] --num-images 100

Writes ``attention_distance.png`` (heads against depth) and
``attention_distance.json`` (``distance[layer][head]`` in pixels, averaged over
images and query patches; class token excluded, see
``densevit.analysis.attention_distance``).
"""
import os.path as osp

import torch

from densevit.analysis.attention_distance import mean_attention_distance
from densevit.analysis.cli import Timer, base_parser, captured_batches, setup, write_json
from densevit.analysis.plots import plot_attention_distance


def main():
    args = base_parser(__doc__.splitlines()[0], images=True).parse_args()
    model, vit = setup(args)
    patch_px = vit.out_strides[0]
    total, count = None, 0
    with Timer() as t:
        for batch, _, attns, hw in captured_batches(model, vit, args):
            d = torch.stack([mean_attention_distance(a, hw, patch_px, vit.num_extra_tokens)
                             for a in attns])  # [L, B, heads]
            total = d.sum(1) if total is None else total + d.sum(1)
            count += len(batch)
    dist = (total / count).tolist()
    png = plot_attention_distance(dist, osp.join(args.out_dir, 'attention_distance.png'),
                                  patch_px)
    js = write_json(args, 'attention_distance.json',
                    dict(distance=dist, patch_size=patch_px, grid=list(hw),
                         num_images=count, seconds=round(t.seconds, 2),
                         cpu_seconds=round(t.cpu_seconds, 2)))
    print(f'{count} images in {t.seconds:.1f} s wall, {t.cpu_seconds:.1f} s CPU\n{png}\n{js}')


if __name__ == '__main__':
    main()
