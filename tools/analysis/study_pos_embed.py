"""The position embeddings a study's runs learned, one panel per row (ViT paper, Fig. 7 centre).

    python tools/analysis/study_pos_embed.py STUDY_DIR [--seed 0] [--work-root work_dirs/studies]
        [--results docs/results] [--out FIG.png] [--json FILE [--with-grids]]

For every config of ``STUDY_DIR`` (a folder of ``tools/run_study.py``: ``configs/studies/vit_pe_seg``)
whose run of ``--seed`` has finished (its metrics file ``<results>/<study>/<config>/seed<S>.json``
written; the last ``iter_*.pth`` under ``<work-root>/<study>/<config>/seed<S>/``), the first table of its ViT
(:func:`densevit.analysis.pos_embed_similarity.position_similarity`: the stem's, the shared one or
layer 0's) as an h x w mosaic of h x w tiles: tile (i, j) shows how similar patch (i, j)'s
embedding is to every other patch's. Learned and sin-cos tables: cosine similarity; a relative
bias: the head-mean bias patch (i, j) adds towards each patch; RoPE: the mean cosine of the
rotation-angle differences. Rows without a position embedding, and runs not finished, are listed
in the figure's caption. Each panel has its own colour scale (printed in its title).

Each panel drawn from a checkpoint is also kept beside the run's metrics file
(``<results>/<study>/<config>/seed<S>_pos_embed.npz``: the grid in float16, its kind and
table), and a finished run whose checkpoint is gone (work folders do not outlive a session;
the metrics files are committed) is drawn from that file: a grid run over several sessions
gets one figure.
"""
import argparse
import glob
import os.path as osp
import re
import sys
import textwrap

import numpy as np

from densevit.analysis.study_rows import position, row_name
from densevit.utils.provenance import add_json_argument, write_result

KIND_LABEL = {'cosine': 'cosine', 'relative_bias': 'bias', 'rope_similarity': 'RoPE cos'}


def last_checkpoint(run_dir):
    """The ``iter_N.pth`` of largest N in ``run_dir``, or None."""
    found = glob.glob(osp.join(run_dir, 'iter_*.pth'))
    if not found:
        return None
    return max(found, key=lambda p: int(re.search(r'iter_(\d+)\.pth$', p)[1]))


def mosaic(grid):
    """[h, w, h, w] -> a (h (h + 1) - 1) x (w (w + 1) - 1) image, tiles apart by NaN lines."""
    h, w = grid.shape[:2]
    out = np.full((h * (h + 1) - 1, w * (w + 1) - 1), np.nan)
    for i in range(h):
        for j in range(w):
            out[i * (h + 1):i * (h + 1) + h, j * (w + 1):j * (w + 1) + w] = grid[i, j]
    return out


def panel_file(results, study, name, seed):
    """Where a run's panel is kept: beside its metrics file."""
    return osp.join(results, study, name, f'seed{seed}_pos_embed.npz')


def save_panel(path, panel):
    np.savez_compressed(path, grid=panel['grid'].astype(np.float16), kind=panel['kind'],
                        table=panel['table'], checkpoint=panel['checkpoint'])


def load_panel(path):
    with np.load(path) as f:
        return dict(table=str(f['table']), kind=str(f['kind']),
                    grid=f['grid'].astype(np.float32), checkpoint=str(f['checkpoint']))


def study_tables(study_dir, work_root, seed, results='docs/results'):
    """(panels, skipped): panels ``(row, kind, grid [h, w, h, w])`` in the study's order,
    from each finished run's last checkpoint, else from its kept panel file."""
    from densevit.analysis.inputs import load_vit_model
    from densevit.analysis.pos_embed_similarity import position_similarity

    study = osp.basename(osp.normpath(study_dir))
    panels, skipped = [], []
    for config in sorted(glob.glob(osp.join(study_dir, '*.py'))):
        name = osp.splitext(osp.basename(config))[0]
        row, where = row_name(config), position(config)
        if where[0] == 'none':
            skipped.append(f'{row} (no position embedding)')
            continue
        kept = panel_file(results, study, name, seed)
        ckpt = last_checkpoint(osp.join(work_root, study, name, f'seed{seed}'))
        finished = osp.exists(osp.join(results, study, name, f'seed{seed}.json'))
        if not finished or (ckpt is None and not osp.exists(kept)):
            skipped.append(f'{row} (not finished)')
            continue
        if ckpt is None:
            panel = load_panel(kept)
        else:
            _, vit = load_vit_model(config, ckpt)
            tables = position_similarity(vit)
            if not tables:
                skipped.append(f'{row} (no position embedding)')
                continue
            first = tables[0]
            panel = dict(table=first['name'], kind=first['kind'], grid=first['grid'].numpy(),
                         checkpoint=ckpt)
            save_panel(kept, panel)
        panels.append(dict(row=row, position=where, **panel))
    return panels, skipped


def draw(panels, skipped, path, title):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    cols = min(4, max(len(panels), 1))
    rows = -(-len(panels) // cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.6 * rows + 0.6), squeeze=False)
    for ax in axes.flat:
        ax.axis('off')
    for ax, p in zip(axes.flat, panels, strict=False):
        g = p['grid']
        ax.imshow(mosaic(g), cmap='viridis', interpolation='nearest')
        ax.set_title(f"{p['row']}\n{KIND_LABEL[p['kind']]} {g.min():.2f} to {g.max():.2f}",
                     fontsize=8)
    fig.suptitle(title, fontsize=10)
    note = 'not shown: ' + ', '.join(skipped) if skipped else ''
    lines = textwrap.wrap(note, 110)
    if lines:
        fig.text(0.5, 0.005, '\n'.join(lines), ha='center', va='bottom', fontsize=7)
    bottom = 0.02 + 0.12 * len(lines) / fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, bottom if lines else 0, 1, 0.97), h_pad=1.5)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('study_dir')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--work-root', default='work_dirs/studies')
    p.add_argument('--results', default='docs/results', help="run_study.py's metrics files")
    p.add_argument('--out', help='the PNG (default: docs/analysis/pos_embed_<study>.png)')
    p.add_argument('--with-grids', action='store_true',
                   help='also write each panel\'s [h, w, h, w] grid to the JSON')
    add_json_argument(p, 'each panel\'s row, kind, value range and checkpoint')
    args = p.parse_args()
    study = osp.basename(osp.normpath(args.study_dir))
    out = args.out or osp.join('docs', 'analysis', f'pos_embed_{study}.png')
    panels, skipped = study_tables(args.study_dir, args.work_root, args.seed,
                                   args.results)
    if not panels:
        sys.exit(f'study_pos_embed: no finished run with a position embedding in '
                 f'{args.work_root}/{study} (seed {args.seed})')
    draw(panels, skipped, out, f'{study}: learned position embeddings, seed {args.seed} '
         '(tile (i, j): patch (i, j) against every patch)')
    print(out)
    if skipped:
        print('not shown: ' + ', '.join(skipped))
    if args.json:
        rows = []
        for panel in panels:
            row = dict(panel, min=float(panel['grid'].min()), max=float(panel['grid'].max()))
            grid = row.pop('grid')
            if args.with_grids:  # [h, w, h, w] each, 4 decimals (megabytes for a whole study)
                row['grid'] = np.round(grid, 4).tolist()
            rows.append(row)
        write_result(args.json, rows, skipped=skipped, seed=args.seed)


if __name__ == '__main__':
    main()
