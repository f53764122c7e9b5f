"""Train a config for a fixed number of minutes, validating on a clock; plot AP vs minutes.

    python tools/analysis/train_curve.py configs/quickstart/detr_vit_shapes.py \
        --minutes 20 --eval-every 2 --work-dir work_dirs/curve

Writes ``<work-dir>/training_clock.csv`` (minutes, iter, metrics) and
``<work-dir>/curve.png``. Minutes are training time: validation is not counted.
Several finished runs can be drawn together with ``--plot-only DIR [DIR ...]``.
"""
import argparse
import csv
import os.path as osp
import sys

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

import densevit  # noqa: F401


# what to draw per task, and the scale its metrics are reported on
CURVE_KEYS = {'coco/bbox_mAP_50': (('coco/bbox_mAP_50', 'coco/bbox_mAP'), 1.0),
              'mIoU': (('mIoU', 'mAcc'), 100.0)}


def plot(work_dirs, out_file):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    top = 1.0
    for wd in work_dirs:
        with open(osp.join(wd, 'training_clock.csv')) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        keys, top = next((v for k, v in CURVE_KEYS.items() if k in rows[0]), ((), 1.0))
        for key, style in zip(keys, ('-o', '--s')):
            ax.plot([float(r['minutes']) for r in rows], [float(r[key]) for r in rows], style,
                    label=f'{osp.basename(osp.normpath(wd))} {key.split("/")[-1]}')
    ax.set_xlabel('training minutes (2-core CPU)')
    ax.set_ylabel('metric on val')
    ax.set_ylim(0, top)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_file, dpi=120)
    print(f'wrote {out_file}')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('config', nargs='?')
    p.add_argument('--minutes', type=float, default=20)
    p.add_argument('--eval-every', type=float, default=2, help='minutes between validations')
    p.add_argument('--work-dir', default='work_dirs/train_curve')
    p.add_argument('--plot-only', nargs='+', help='draw existing runs into --out')
    p.add_argument('--out', help='PNG path (default: <work-dir>/curve.png)')
    p.add_argument('--stop-at', nargs=2, metavar=('KEY', 'VALUE'),
                   help='also stop once a validation metric reaches VALUE, '
                        'e.g. --stop-at coco/bbox_mAP_50 0.9')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    args = p.parse_args(argv)
    if args.plot_only:
        plot(args.plot_only, args.out or 'curve.png')
        return 0
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir
    # the clock decides when to validate and stop; the loop's own limits are pushed out of the way
    cfg.train_cfg.max_iters = 10 ** 8
    cfg.train_cfg.val_interval = 10 ** 8
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=10 ** 8,
                                        save_last=True)
    cfg.custom_hooks = list(cfg.get('custom_hooks', [])) + [
        dict(type='TrainingClockHook', budget_minutes=args.minutes,
             eval_every_minutes=args.eval_every,
             stop_at=dict(key=args.stop_at[0], value=float(args.stop_at[1])) if args.stop_at else None)]
    runner = Runner.from_cfg(cfg)
    runner.train()
    # the clock stops the loop early, so CheckpointHook's save_last never sees a last iteration
    runner.save_checkpoint(args.work_dir, f'iter_{runner.iter}.pth')
    plot([args.work_dir], args.out or osp.join(args.work_dir, 'curve.png'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
