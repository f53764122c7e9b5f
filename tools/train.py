"""Train a densevit model: ``python tools/train.py CONFIG [--work-dir DIR] [--resume [PATH]]``."""
import argparse
import os
import os.path as osp
import sys

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

import densevit  # noqa: F401  (allow-lists checkpoint types for torch.load)
from densevit.checkpoint.safe_load import use_safe_checkpoint_loader
from densevit.engine.amp_optim_wrapper import amp_optim_wrapper
from densevit.engine.launch import setup_launcher
from densevit.engine.preflight import missing_inputs


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
    p.add_argument('--tensorboard', action='store_true',
                   help='also log scalars to TensorBoard (<work_dir>/<timestamp>/vis_data); '
                        'needs `pip install tensorboard`')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                   help='override config entries, e.g. train_cfg.max_epochs=12')
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none')
    p.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def build_config(args):
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        './work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.amp:
        cfg.optim_wrapper = amp_optim_wrapper(cfg.optim_wrapper)
    if args.tensorboard:
        backends = list(cfg.visualizer.get('vis_backends') or [dict(type='LocalVisBackend')])
        if not any(b.get('type') == 'TensorboardVisBackend' for b in backends):
            backends.append(dict(type='TensorboardVisBackend'))
        cfg.visualizer.vis_backends = backends
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume:
        cfg.resume, cfg.load_from = True, args.resume
    return setup_launcher(cfg, args.launcher)


def main(argv=None):
    args = parse_args(argv)
    use_safe_checkpoint_loader()  # load_from / --resume: weights_only=True, clear errors
    cfg = build_config(args)
    problems = missing_inputs(cfg, resume=bool(args.resume))
    if problems:
        for line in problems:
            print(f'densevit: {line}', file=sys.stderr)
        return 1
    Runner.from_cfg(cfg).train()
    return 0


if __name__ == '__main__':
    sys.exit(main())
