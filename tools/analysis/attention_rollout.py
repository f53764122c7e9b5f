"""Attention rollout maps of a ViT backbone (Abnar & Zuidema 2020) over images.

    python tools/analysis/attention_rollout.py CONFIG CHECKPOINT [IMAGES...] --num-images 100 --show 4

From the class token, or averaged over patch queries when the model has none.
Writes ``attention_rollout_<i>.png`` for the first ``--show`` images (map
overlaid on the image) and ``attention_rollout.json`` (the [h, w] map of
every image, rows summing to 1 over all tokens).
"""
import os.path as osp

import torch.nn.functional as F

from densevit.analysis.attention_rollout import attention_rollout, rollout_map
from densevit.analysis.cli import Timer, base_parser, captured_batches, setup, write_json
from densevit.analysis.inputs import bgr_to_rgb
from densevit.analysis.plots import overlay_maps


def upsample(maps, size):
    """[k, h, w] -> [k, H, W] bilinear, each scaled to [0, 1] for display."""
    m = F.interpolate(maps[:, None].float(), size=size, mode='bilinear', align_corners=False)[:, 0]
    lo = m.flatten(1).min(1).values[:, None, None]
    hi = m.flatten(1).max(1).values[:, None, None]
    return ((m - lo) / (hi - lo).clamp_min(1e-12)).numpy()


def main():
    p = base_parser(__doc__.splitlines()[0], images=True)
    p.add_argument('--show', type=int, default=4, help='images drawn (all go to the JSON)')
    args = p.parse_args()
    model, vit = setup(args)
    maps, pngs, n = [], [], 0
    with Timer() as t:
        for batch, _, attns, hw in captured_batches(model, vit, args):
            m = rollout_map(attention_rollout(attns), hw, vit.num_extra_tokens)  # [B, h, w]
            maps += m.tolist()
            for img, mi in zip(batch, m, strict=True):
                if n < args.show:
                    png = osp.join(args.out_dir, f'attention_rollout_{n}.png')
                    source = 'class token' if vit.num_extra_tokens else 'mean over patches'
                    pngs.append(overlay_maps(bgr_to_rgb(img), upsample(mi[None], img.shape[:2]),
                                             png, titles=[f'rollout ({source})']))
                n += 1
    js = write_json(args, 'attention_rollout.json',
                    dict(maps=maps, grid=list(hw), from_class_token=bool(vit.num_extra_tokens),
                         seconds=round(t.seconds, 2), cpu_seconds=round(t.cpu_seconds, 2)))
    print(f'{n} images in {t.seconds:.1f} s wall, {t.cpu_seconds:.1f} s CPU')
    print('\n'.join(pngs + [js]))


if __name__ == '__main__':
    main()
