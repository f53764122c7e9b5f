"""Principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

    python tools/analysis/patch_filters.py CONFIG CHECKPOINT [--num-components 28]

Writes ``patch_filters.png`` (each component min-max scaled to [0, 1], channels
in the model's input order: RGB for configs with ``bgr_to_rgb=True``) and
``patch_filters.json`` (components and explained variance ratios).
"""
import os.path as osp

from densevit.analysis.cli import base_parser, setup, write_json
from densevit.analysis.patch_filters import patch_embedding_pcs, to_unit_range
from densevit.analysis.plots import plot_filters


def main():
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument('--num-components', type=int, default=28)
    args = p.parse_args()
    _, vit = setup(args)
    weight = vit.patch_embed.proj.weight
    if weight.shape[1] not in (1, 3):
        raise SystemExit(f'patch filters have {weight.shape[1]} input channels (a hybrid stem?): '
                         f'only image (1 or 3 channel) filters can be drawn')
    pcs, ratio = patch_embedding_pcs(weight, args.num_components)
    png = plot_filters(to_unit_range(pcs).numpy(), osp.join(args.out_dir, 'patch_filters.png'),
                       f'top {len(pcs)} principal components of the patch embedding')
    js = write_json(args, 'patch_filters.json',
                    dict(explained_variance_ratio=ratio.tolist(), components=pcs.tolist()))
    print(f'{png}\n{js}')


if __name__ == '__main__':
    main()
