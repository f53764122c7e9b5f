"""Train a densevit model: ``python tools/train.py CONFIG [--work-dir DIR] [--resume [PATH]]``.

``--minutes M [--eval-every N]`` trains on a clock instead of the config's
iteration limit: validation every N training minutes (validation time is not
counted), a stop after M, the metric-versus-minutes table and picture in the work
dir (``training_clock.csv``, ``curve.png``) and a checkpoint where it stopped.
"""
import argparse
import os
import os.path as osp

import densevit  # noqa: F401  (allow-lists checkpoint types for torch.load)
from densevit.datasets.transforms.loading import IMAGE_ERRORS
from densevit.engine.amp_optim_wrapper import amp_optim_wrapper
from densevit.engine.checkpoint_hook import read_last_checkpoint
from densevit.engine.cli import (
    ONE_LINE_ERRORS,
    CfgOptions,
    config_problems,
    load_config,
    one_line,
    report,
)
from densevit.engine.interrupt import TrainingInterrupted
from densevit.engine.launch import exit_process, setup_launcher, shutdown_distributed
from densevit.engine.runner import Runner
from densevit.engine.training_clock_hook import NO_LIMIT
from densevit.engine.work_dir_lock import acquire_work_dir, is_global_rank_zero, release_work_dir


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Train a detector or segmentor')
    p.add_argument('config', help='config file')
    p.add_argument('--work-dir', help='where logs and checkpoints go '
                   '(default: ./work_dirs/<config name>)')
    p.add_argument('--resume', nargs='?', type=str, const='auto',
                   help='resume from PATH, or from the latest checkpoint in the work dir when '
                        'no PATH is given')
    p.add_argument('--amp', action='store_true',
                   help='automatic mixed precision: fp16 with loss scaling on GPU, bf16 on CPU')
    p.add_argument('--auto-scale-lr', action='store_true',
                   help='scale the learning rate linearly with the total batch size (processes '
                        "x batch size) against the config's auto_scale_lr.base_batch_size")
    p.add_argument('--tensorboard', action='store_true',
                   help='also log scalars to TensorBoard (<work_dir>/<timestamp>/vis_data); '
                        'needs `pip install tensorboard`')
    clock = p.add_argument_group('training on a clock')
    clock.add_argument('--minutes', type=float,
                       help='train for this many minutes (validation not counted) instead of '
                            'the config\'s iteration limit; the learning-rate schedule is kept '
                            'as the config writes it, in iterations; with --resume the clock '
                            'starts from zero again')
    clock.add_argument('--eval-every', type=float,
                       help='with --minutes: validate every this many training minutes '
                            '(default: a tenth of --minutes)')
    clock.add_argument('--stop-at', nargs=2, metavar=('KEY', 'VALUE'),
                       help='with --minutes: also stop once a validation metric reaches VALUE, '
                            'e.g. --stop-at coco/bbox_mAP_50 0.9')
    p.add_argument('--cfg-options', nargs='+', action=CfgOptions, default={},
                   help='override config entries, e.g. train_cfg.max_epochs=12')
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none')
    p.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = p.parse_args(argv)
    if args.minutes is None and (args.eval_every is not None or args.stop_at):
        p.error('--eval-every and --stop-at go with --minutes')
    if args.minutes is not None and args.minutes <= 0:
        p.error(f'--minutes must be positive, got {args.minutes}')
    if args.minutes is not None and args.launcher != 'none':
        p.error('--minutes trains one process: each process would keep its own clock and '
                'decide alone when to validate and stop')
    if args.eval_every is not None and args.eval_every <= 0:
        p.error(f'--eval-every must be positive, got {args.eval_every}')
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def train_on_clock(cfg, minutes, eval_every=None, stop_at=None):
    """Let a ``TrainingClockHook`` decide when to validate and stop (see the module doc)."""
    if cfg.train_cfg.get('type') != 'IterBasedTrainLoop':
        raise ValueError('--minutes needs an iteration-based config (train_cfg.type='
                         f"'IterBasedTrainLoop'); this one has {cfg.train_cfg.get('type')!r}")
    # the clock decides when to validate and stop; the loop's own limits are pushed away
    cfg.train_cfg.max_iters = NO_LIMIT
    cfg.train_cfg.val_interval = NO_LIMIT
    cfg.custom_hooks = list(cfg.get('custom_hooks', [])) + [
        dict(type='TrainingClockHook', budget_minutes=minutes,
             eval_every_minutes=eval_every or minutes / 10,
             stop_at=dict(key=stop_at[0], value=float(stop_at[1])) if stop_at else None)]
    return cfg


def build_config(args):
    cfg = load_config(args.config, args.cfg_options)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        './work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.amp:
        cfg.optim_wrapper = amp_optim_wrapper(cfg.optim_wrapper)
    if args.tensorboard:
        backends = list(cfg.visualizer.get('vis_backends') or [dict(type='LocalVisBackend')])
        if not any(b.get('type') == 'TensorboardVisBackend' for b in backends):
            backends.append(dict(type='TensorboardVisBackend'))
        cfg.visualizer.vis_backends = backends
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise ValueError('--auto-scale-lr needs auto_scale_lr = dict(base_batch_size=N) in '
                             'the config (the total batch its learning rate is meant for)')
        cfg.auto_scale_lr.enable = True
    if args.minutes is not None:
        cfg = train_on_clock(cfg, args.minutes, args.eval_every, args.stop_at)
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume:
        cfg.resume, cfg.load_from = True, args.resume
    return setup_launcher(cfg, args.launcher)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = build_config(args)
    except ValueError as e:
        return report([f'{args.config}: {e}'])
    problems = config_problems(cfg, resume=bool(args.resume))
    if problems:
        return report(problems)
    if cfg.get('launcher', 'none') == 'none':  # distributed: dist_faults handles SIGTERM
        cfg.custom_hooks = list(cfg.get('custom_hooks', [])) + [dict(type='InterruptHook')]
    lock = None
    try:
        if is_global_rank_zero(cfg.get('launcher')):
            lock = acquire_work_dir(cfg.work_dir)
        Runner.from_cfg(cfg).train()
    except TrainingInterrupted as e:
        report([str(e)])
        return e.exit_code
    except KeyboardInterrupt:  # before training started, or a second Ctrl-C
        last = read_last_checkpoint(cfg.work_dir)
        report(['interrupted (Ctrl-C); ' + (f'the last complete checkpoint is {last}: continue '
                f'with --resume' if last else 'no checkpoint was saved')])
        return 130
    except (*ONE_LINE_ERRORS, *IMAGE_ERRORS) as e:  # also from a DataLoader worker
        return report([one_line(e)])
    finally:
        if lock:
            release_work_dir(lock)
    shutdown_distributed()
    return 0


if __name__ == '__main__':
    exit_process(main())
