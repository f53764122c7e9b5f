"""Position-embedding similarity figure (ViT paper, Fig. 7 centre / Fig. 10).

    python tools/analysis/pos_embed_similarity.py CONFIG CHECKPOINT [--grid H W]

Writes ``pos_embed_similarity_<name>.png`` (one per table: ``stem``, ``shared``
or ``layer<i>``) and ``pos_embed_similarity.json`` (the [h, w, h, w] grids).
Absolute tables: cosine similarity; relative bias: the head-mean bias; RoPE: the
cosine similarity of its rotation angles' sinusoids (per-head values in the JSON for a
relative bias and RoPE-Mixed; see ``densevit.analysis.pos_embed_similarity``).
"""
import os.path as osp

from densevit.analysis.cli import base_parser, setup, write_json
from densevit.analysis.plots import plot_similarity_grid
from densevit.analysis.pos_embed_similarity import position_similarity


def main():
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument('--grid', type=int, nargs=2, metavar=('H', 'W'),
                   help='patch grid; default: the one the table was made for')
    args = p.parse_args()
    _, vit = setup(args)
    results = position_similarity(vit, args.grid)
    numbers = {}
    for r in results:
        png = osp.join(args.out_dir, f"pos_embed_similarity_{r['name']}.png")
        label = {'cosine': 'cosine similarity', 'relative_bias': 'attention bias (head mean)',
                 'rope_similarity': 'RoPE similarity, mean cos of angle differences'}[r['kind']]
        plot_similarity_grid(r['grid'].numpy(), png, f"position embedding: {r['name']}", label)
        entry = dict(kind=r['kind'], hw=list(r['hw']), grid=r['grid'].tolist())
        for key in ('per_head', 'frequencies'):
            if key in r:
                entry[key] = r[key].tolist()
        numbers[r['name']] = entry
        print(png)
    print(write_json(args, 'pos_embed_similarity.json', numbers))


if __name__ == '__main__':
    main()
