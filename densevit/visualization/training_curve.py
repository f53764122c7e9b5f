"""Draw "metric versus training minutes" curves from ``training_clock.csv`` files.

``TrainingClockHook`` writes one row per validation (``minutes, iter, <metrics>``);
``tools/train.py --minutes`` draws its own run into ``<work_dir>/curve.png`` and
``tools/analysis/plot_curves.py`` draws several runs into one picture.
"""
import csv
import os.path as osp

# what to draw per task, and the top of its y axis
CURVE_KEYS = {'coco/bbox_mAP_50': (('coco/bbox_mAP_50', 'coco/bbox_mAP'), 1.0),
              'mIoU': (('mIoU', 'mAcc'), 100.0)}


def read_clock_csv(work_dir, file_name='training_clock.csv'):
    """The rows of ``<work_dir>/<file_name>`` as dicts of strings."""
    path = osp.join(work_dir, file_name)
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path}: no such file (written by tools/train.py --minutes)')
    with open(path) as f:
        return list(csv.DictReader(f))


def plot_curves(work_dirs, out_file, xlabel='training minutes', file_name='training_clock.csv'):
    """Draw each run's main metric (solid) and its companion (dashed) against minutes."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    top = 1.0
    for wd in work_dirs:
        rows = read_clock_csv(wd, file_name)
        if not rows:
            continue
        keys, top = next((v for k, v in CURVE_KEYS.items() if k in rows[0]), ((), 1.0))
        for key, style in zip(keys, ('-o', '--s'), strict=False):
            ax.plot([float(r['minutes']) for r in rows], [float(r[key]) for r in rows], style,
                    label=f'{osp.basename(osp.normpath(wd))} {key.split("/")[-1]}')
    ax.set_xlabel(xlabel)
    ax.set_ylabel('metric on val')
    ax.set_ylim(0, top)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_file, dpi=120)
    plt.close(fig)
    return out_file
