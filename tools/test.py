"""Evaluate a checkpoint: ``python tools/test.py CONFIG CHECKPOINT [--out F] [--show-dir D]
[--tta [--tta-ratios R ...] [--tta-no-flip]]``."""
import argparse
import os
import os.path as osp
import sys

from mmengine.dist import is_main_process
from mmengine.evaluator import DumpResults

import densevit  # noqa: F401  (allow-lists checkpoint types for torch.load)
from densevit.datasets.transforms.loading import IMAGE_ERRORS
from densevit.engine.cli import (
    ONE_LINE_ERRORS,
    CfgOptions,
    ConfigError,
    config_problems,
    load_config,
    one_line,
    report,
)
from densevit.engine.launch import exit_process, setup_launcher, shutdown_distributed
from densevit.engine.runner import Runner
from densevit.evaluation.panoptic_quality import summary_table
from densevit.models.tta.support import apply_tta
from densevit.utils.provenance import add_json_argument, write_result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Test (and evaluate) a model')
    p.add_argument('config', help='config file')
    p.add_argument('checkpoint', help='checkpoint file: densevit\'s own, or MMSegmentation / '
                   'MMDetection / official / Hugging Face (converted on load)')
    p.add_argument('--non-strict', action='store_true',
                   help='evaluate even when some weights do not load (reported as WARNING '
                        'lines); by default any missing, unexpected or mis-shaped tensor stops')
    p.add_argument('--backend', choices=['pytorch', 'onnxruntime'], default='pytorch',
                   help='onnxruntime: CHECKPOINT is a file from tools/deploy/export_onnx.py, '
                        'run with the same dataset, pipeline, data preprocessor, '
                        'post-processing and metric (needs the deploy extra)')
    p.add_argument('--work-dir', help='where logs and metrics go')
    p.add_argument('--out', help='dump the raw predictions to this .pkl file')
    add_json_argument(p, 'the metrics, with the config, checkpoint and options of the run')
    p.add_argument('--show-dir', help='write a PNG per image, ground truth | prediction, to '
                   'WORK_DIR/TIMESTAMP/SHOW_DIR: panoptic segments, else instance masks, else '
                   'boxes or class maps, whichever the predictions hold; images under 512 px '
                   'a side drawn enlarged')
    p.add_argument('--score-thr', type=float, default=0.3,
                   help='drawing threshold for --show-dir (boxes, instance masks)')
    p.add_argument('--tta', action='store_true',
                   help='test-time augmentation: the config\'s tta_model / tta_pipeline, or '
                        'the defaults (segmentation: scales 0.5-1.75 x flip, probabilities '
                        'averaged; detection: scales 0.5, 1, 1.5 x flip, class-wise NMS)')
    p.add_argument('--tta-ratios', type=float, nargs='+',
                   help='with --tta: scale ratios (of the test Resize, or of the original '
                        'image when the test pipeline has none), rebuilding tta_pipeline')
    p.add_argument('--tta-no-flip', action='store_true',
                   help='with --tta: no horizontal flip views (rebuilds tta_pipeline)')
    p.add_argument('--bf16', action='store_true',
                   help='predict under bf16 autocast (CPU or GPU); prediction layers and '
                        'post-processing stay float32 (docs/benchmarks.md: accuracy, speed)')
    p.add_argument('--cfg-options', nargs='+', action=CfgOptions, default={})
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none')
    p.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def summary(metrics):
    """Lines printed after the run's log for the headline numbers a metric's table
    would bury: panoptic quality (all / things / stuff) and mask AP."""
    lines = []
    table = summary_table(metrics)
    if table:
        lines += ['panoptic quality (%):', table]
    segm = {k.rsplit('/', 1)[-1]: v for k, v in metrics.items() if 'segm_mAP' in k}
    if segm:
        lines.append('mask AP: ' + '  '.join(
            f'{name} {segm[key]:.3f}' for name, key in (
                ('AP', 'segm_mAP'), ('AP50', 'segm_mAP_50'), ('AP75', 'segm_mAP_75'),
                ('APs', 'segm_mAP_s'), ('APm', 'segm_mAP_m'), ('APl', 'segm_mAP_l'))
            if key in segm))
    return lines


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
    except ConfigError as e:
        return report([f'{args.config}: {e}'])
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        './work_dirs', osp.splitext(osp.basename(args.config))[0])
    onnx = args.backend == 'onnxruntime'
    cfg.load_from = None if onnx else args.checkpoint
    if onnx and (args.tta or args.bf16):
        print('densevit: --tta and --bf16 apply to PyTorch checkpoints, not to '
              '--backend onnxruntime', file=sys.stderr)
        return 1
    if (args.tta_ratios or args.tta_no_flip) and not args.tta:
        print('densevit: --tta-ratios / --tta-no-flip need --tta', file=sys.stderr)
        return 1
    if args.tta:
        if args.show_dir:
            print('densevit: --show-dir draws single-view predictions; leave out --tta',
                  file=sys.stderr)
            return 1
        try:
            apply_tta(cfg, args.tta_ratios, False if args.tta_no_flip else None)
        except ValueError as e:  # a head that cannot merge views, a pipeline to derive from
            print(f'densevit: {args.config}: {e}', file=sys.stderr)
            return 1
    if args.bf16:
        cfg.test_cfg = dict(type='AutocastTestLoop', precision='bf16')
    if args.show_dir:
        vis = cfg.default_hooks.visualization
        vis.draw, vis.test_out_dir, vis.score_thr = True, args.show_dir, args.score_thr
    try:
        cfg = setup_launcher(cfg, args.launcher)
    except ValueError as e:  # a timeout that is not a positive number of seconds
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    # only the test split is read; the checkpoint is checked as load_from
    problems = config_problems(cfg, loaders=('test_dataloader',), pretrained=False)
    if args.out and not args.out.endswith(('.pkl', '.pickle')):
        problems.append(f'--out must end with .pkl or .pickle: {args.out}')
    if problems:
        return report(problems)
    runner = Runner.from_cfg(cfg)
    runner.strict_load = not args.non_strict
    if onnx:
        try:
            from densevit.deploy.onnx_model import OnnxRuntimeModel
            from densevit.deploy.runtime import OnnxGraphError, check_fixed_batch
        except ImportError as e:
            print(f'densevit: --backend onnxruntime needs the deploy extra '
                  f'(pip install -e .[deploy]): {e}', file=sys.stderr)
            return 1
        try:  # the network runs in ONNX Runtime; data handling and metric stay the same
            runner.model = OnnxRuntimeModel(runner.model, args.checkpoint)
            check_fixed_batch(runner.model.graph, runner.test_dataloader.batch_size,
                              len(runner.test_dataloader.dataset))
        except OnnxGraphError as e:
            print(f'densevit: {e}', file=sys.stderr)
            return 1
    if args.out:
        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    try:
        metrics = runner.test()
    except (*ONE_LINE_ERRORS, *IMAGE_ERRORS) as e:  # also from a DataLoader worker
        return report([one_line(e)])
    if is_main_process():
        for line in summary(metrics or {}):
            print(line)
    if args.json and is_main_process():
        write_result(args.json, metrics, config=args.config, checkpoint=args.checkpoint,
                     backend=args.backend, tta=args.tta, tta_ratios=args.tta_ratios,
                     tta_flip=not args.tta_no_flip, bf16=args.bf16,
                     cfg_options=args.cfg_options)
    shutdown_distributed()
    if args.show_dir:
        # mmengine's visualization hooks write under the run's timestamped log dir
        print(f'densevit: drawings written to {osp.join(runner.log_dir, args.show_dir)}')
    return 0


if __name__ == '__main__':
    exit_process(main())
