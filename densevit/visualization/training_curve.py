"""Draw validation metrics of training runs against training minutes or iterations.

A run trained on a clock (``tools/train.py --minutes``) has ``training_clock.csv``
(``minutes, iter, <metrics>``, one row per validation, written by
``TrainingClockHook``); every run has mmengine's ``<timestamp>/vis_data/scalars.json``
(one JSON record per logged step; validation records carry the metrics and ``step``,
the iteration); a run of ``tools/run_seeds.py`` also leaves its metrics file
(``seedS.json``: every validation by iteration), which stands for its work dir once that is
gone. ``tools/train.py --minutes`` draws its own run into
``<work_dir>/curve.png``; ``tools/analysis/plot_curves.py`` draws several runs into
one picture.
"""
import csv
import glob
import json
import os.path as osp

# what to draw per task, and the top of its y axis (None: as high as the values go)
# panoptic first: a mask classifier logs PQ with mIoU, DETR panoptic PQ with box AP; PQ is
# the main metric of both
CURVE_KEYS = {'coco_panoptic/PQ': (('coco_panoptic/PQ', 'mIoU'), 100.0),
              'coco/bbox_mAP_50': (('coco/bbox_mAP_50', 'coco/bbox_mAP'), 1.0),
              'mIoU': (('mIoU', 'mAcc'), 100.0),
              'pretrain/objective': (('pretrain/objective',), None)}  # MAE / MPP: lower is better


def read_clock_csv(work_dir, file_name='training_clock.csv'):
    """The rows of ``<work_dir>/<file_name>`` as dicts of strings."""
    path = osp.join(work_dir, file_name)
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path}: no such file (written by tools/train.py --minutes)')
    with open(path) as f:
        return list(csv.DictReader(f))


def _log_records(work_dir, wanted):
    """The records of every run's ``*/vis_data/scalars.json`` in ``work_dir`` for which
    ``wanted(record)`` holds, as rows with ``iter`` = ``step`` in iteration order (a resumed
    run's later records replace earlier ones at the same iteration), and every key seen."""
    files = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    if not files:
        raise FileNotFoundError(f'{work_dir}: no */vis_data/scalars.json (not a training work '
                                'dir of tools/train.py?)')
    rows, seen = {}, set()
    for path in files:
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                seen |= set(record)
                if wanted(record):
                    rows[record['step']] = dict(record, iter=record['step'])
    return [rows[k] for k in sorted(rows)], seen


def read_val_records(work_dir):
    """Validation records of every run in ``work_dir`` (``*/vis_data/scalars.json``), as
    rows ``{'iter': step, <metric>: value}`` in iteration order; a resumed run's later
    records replace earlier ones at the same iteration."""
    return _log_records(work_dir, lambda record: any(k in record for k in CURVE_KEYS))[0]


def read_train_records(work_dir, keys):
    """Training-log records of every run in ``work_dir`` that carry any of ``keys`` (the
    losses and other scalars the logger wrote: ``loss``, ``teacher_entropy``, ...), as rows
    ``{'iter': step, <key>: value}`` like :func:`read_val_records` (validation records left
    out). A key no record has is refused, naming the scalars there are."""
    def wanted(record):  # a validation record's time / data_time are not the training step's
        return any(k in record for k in keys) and not any(k in record for k in CURVE_KEYS)
    rows, seen = _log_records(work_dir, wanted)
    missing = [k for k in keys if k not in seen]
    if missing:
        raise ValueError(f'{work_dir}: no {", ".join(missing)} in its training log; it has '
                         f'{", ".join(sorted(seen - {"step"}))}')
    return rows


def read_seed_file(path):
    """Validation rows ``{'iter': step, <metric>: value}`` of a ``tools/run_seeds.py``
    metrics file (``results.validations``: ``{iteration: {metric: value}}``)."""
    with open(path) as f:
        found = json.load(f).get('results', {}).get('validations')
    if not isinstance(found, dict) or not found:
        raise ValueError(f'{path}: not a tools/run_seeds.py metrics file (no results.validations)')
    return [dict(found[k], iter=int(k)) for k in sorted(found, key=int)]


def read_rows(work_dir, x, file_name='training_clock.csv', keys=None):
    """Rows with ``x`` ('minutes' or 'iter') and the metrics, from the right file;
    ``work_dir`` may also be a ``tools/run_seeds.py`` metrics file (iterations only). With
    ``keys``, the training log's rows of those scalars instead (iterations, a work dir)."""
    if keys:
        if x != 'iter':
            raise ValueError('training-log scalars (--keys) are drawn against iterations '
                             '(use --x iter)')
        return read_train_records(str(work_dir), keys)
    if work_dir.endswith('.json') and osp.isfile(work_dir):
        if x != 'iter':
            raise ValueError(f'{work_dir}: a metrics file has iterations, not training minutes '
                             '(use --x iter)')
        return read_seed_file(work_dir)
    if x == 'minutes' or osp.isfile(osp.join(work_dir, file_name)):
        return read_clock_csv(work_dir, file_name)
    return read_val_records(work_dir)


def series(rows, x, key):
    """(``x`` values, ``key``'s values) of the rows that have ``key``."""
    found = [r for r in rows if key in r]
    return [float(r[x]) for r in found], [float(r[key]) for r in found]


def _curve_keys(work_dir, rows, keys=None):
    """(metrics to draw: main, companion; top of the y axis) of a run's task (``CURVE_KEYS``),
    or the training-log scalars ``keys`` asked for (the y axis as high as they go)."""
    if keys:
        return tuple(keys), None
    found = next((v for k, v in CURVE_KEYS.items() if k in rows[0]), None)
    if found is None:
        raise ValueError(f'{work_dir}: none of the metrics drawn ({", ".join(CURVE_KEYS)}) in '
                         f'its records: {", ".join(sorted(rows[0]))}')
    return found


def curve_table(work_dirs, x='iter', file_name='training_clock.csv', labels=None, keys=None):
    """A Markdown table of each run's main metric (a row per run, a column per ``x`` at
    which any run validated; blank where a run did not); with ``keys``, of the first of
    those training-log scalars at every logged iteration."""
    labels = labels or [osp.basename(osp.normpath(wd)) for wd in work_dirs]
    if len(labels) != len(work_dirs):
        raise ValueError(f'{len(labels)} labels for {len(work_dirs)} work dirs')
    runs, columns = [], set()
    for wd, label in zip(work_dirs, labels, strict=True):
        rows = read_rows(wd, x, file_name, keys)
        key = _curve_keys(wd, rows, keys)[0][0] if rows else ''
        values = dict(zip(*series(rows, x, key), strict=True))
        runs.append((label, key, values))
        columns |= set(values)
    columns = sorted(columns)
    lines = ['| ' + ' | '.join(['run', 'metric', *(f'{c:g}' for c in columns)]) + ' |',
             '|' + '---|' * (len(columns) + 2)]
    for label, key, values in runs:
        cells = [f'{values[c]:.4g}' if c in values else '' for c in columns]
        lines.append('| ' + ' | '.join([label, key, *cells]) + ' |')
    return '\n'.join([f'(columns: {"training minutes" if x == "minutes" else "iteration"})',
                      *lines])


def plot_curves(work_dirs, out_file, x='minutes', file_name='training_clock.csv', labels=None,
                keys=None, group=None):
    """Draw each run's main metric (solid) and its companion (dashed) against ``x``.

    Args:
        work_dirs (list[str]): training work dirs.
        out_file (str): PNG to write.
        x (str): ``'minutes'`` (clocked runs) or ``'iter'`` (any run).
        labels (list[str], optional): legend names (default: the folder names).
        keys (list[str], optional): one or two training-log scalars (``loss``,
            ``teacher_entropy``, ...) to draw instead of the validation metric (``x='iter'``).
        group (int, optional): runs given in groups of this many (a config's seeds) share a
            colour, each member its own marker; default one colour per run.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    top = 1.0
    labels = labels or [osp.basename(osp.normpath(wd)) for wd in work_dirs]
    if len(labels) != len(work_dirs):
        raise ValueError(f'{len(labels)} labels for {len(work_dirs)} work dirs')
    if group is not None and group < 1:
        raise ValueError(f'group must be at least 1, got {group}')
    for i, (wd, label) in enumerate(zip(work_dirs, labels, strict=True)):
        rows = read_rows(wd, x, file_name, keys)
        if not rows:
            continue
        drawn, top = _curve_keys(wd, rows, keys)
        styles = ('-', '--') if keys else ('-o', '--s')  # a training log: too many points to mark
        # one colour per run (or per group of runs): its main metric solid, the companion dashed
        color = None if group is None else f'C{(i // group) % 10}'
        if group is not None and not keys:
            marker = 'osv^D<>p'[i % group % 8]
            styles = ('-' + marker, '--' + marker)
        for key, style in zip(drawn, styles, strict=False):
            xs, values = series(rows, x, key)
            if not xs:  # a companion the run does not log (DETR panoptic: mIoU)
                continue
            (line,) = ax.plot(xs, values, style, color=color,
                              label=f'{label} {key.split("/")[-1]}')
            color = line.get_color()
    ax.set_xlabel('training minutes' if x == 'minutes' else 'iteration')
    ax.set_ylabel('training log' if keys else 'metric on val')
    if not keys:  # a training log's scalars keep matplotlib's own limits (a loss may be < 0)
        ax.set_ylim(0, top)  # top None: matplotlib's own upper limit
    ax.grid(alpha=0.3)
    n = len(ax.get_lines())
    if n > 8:  # a legend that would hide the curves goes beside them, in two columns
        ncol = 1 if n <= 24 else 2  # past the 24 rows that fit the figure's height
        fig.set_size_inches(9 + 4 * (ncol - 1), 4)
        ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1), ncol=ncol)
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_file, dpi=120)
    plt.close(fig)
    return out_file
