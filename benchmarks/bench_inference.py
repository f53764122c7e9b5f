"""Inference variants against PyTorch fp32 on a trained checkpoint (bf16, ONNX Runtime): the
metric of each and the speed-up, in one run, interleaved batch by batch.

    python benchmarks/bench_inference.py CONFIG CHECKPOINT
        [--variants fp32 bf16 bf16-naive onnxruntime] [--onnx F.onnx]
        [--threads N] [--batch N] [--json FILE]

The config's test split goes through its own pipeline; each batch is predicted once per
variant (``model.test_step`` timed alone, the variants' order alternating from batch to
batch so that a change in the machine's load falls on all of them alike) and each
variant's predictions go to its own copy of the config's test metric. Variants:

- ``fp32``: no autocast;
- ``bf16``: ``torch.autocast(device, bfloat16)`` with densevit's float32 parts (prediction
  layers, deformable reference points and box refinement, post-processing:
  ``densevit/utils/precision.py``), as ``tools/test.py --bf16``;
- ``bf16-naive``: autocast over everything, predictions only cast to float32 at the end
  (what mmengine's ``fp16=True`` gave with a metric that casts; the ablation);
- ``onnxruntime``: the network exported to ONNX (``--onnx F.onnx``, else exported here with
  dynamic axes as ``tools/deploy/export_onnx.py --dynamic`` does) and run by ONNX Runtime with
  the torch thread count, data preprocessor and post-processing shared
  (``OnnxRuntimeModel``, as ``tools/test.py --backend onnxruntime``).

Printed: each variant's metrics, its difference from fp32, and its median time per batch
and speed-up over fp32; ``--json FILE`` writes them with the command, commit, CPU and thread
count (``densevit.utils.provenance``).
"""
import argparse
import contextlib
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from densevit.apis import init_model
from densevit.models.heads import deformable_detr_head, detr_head, plain_detr_head
from densevit.models.layers import deformable_detr_transformer
from densevit.utils.precision import autocast_context
from densevit.utils.provenance import add_json_argument, write_result

_PATCHED = (detr_head, deformable_detr_head, plain_detr_head, deformable_detr_transformer)


@contextlib.contextmanager
def naive_bf16():
    """Every module under autocast: densevit's float32 islands switched off."""
    saved = [m.run_in_fp32 for m in _PATCHED]
    for m in _PATCHED:
        m.run_in_fp32 = lambda fn, *args, **kwargs: fn(*args, **kwargs)
    try:
        yield
    finally:
        for m, f in zip(_PATCHED, saved, strict=True):
            m.run_in_fp32 = f


def variant_context(name, device):
    if name in ('fp32', 'onnxruntime'):
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if name == 'bf16-naive':
        stack.enter_context(naive_bf16())
    stack.enter_context(autocast_context('bf16', device))
    return stack


def onnx_model(model, onnx_file, workdir):
    """``OnnxRuntimeModel`` of ``model``: ``onnx_file``, else exported into ``workdir``."""
    from densevit.deploy.export import export_onnx
    from densevit.deploy.onnx_model import OnnxRuntimeModel
    if onnx_file is None:
        onnx_file = Path(workdir) / 'model.onnx'
        with torch.no_grad():
            export_onnx(model, onnx_file, dynamic=True)
    return OnnxRuntimeModel(model, onnx_file, threads=torch.get_num_threads())


def run(config, checkpoint, variants, batch=None, onnx_file=None):
    model = init_model(config, checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: (onnx_model(model, onnx_file, tmp) if name == 'onnxruntime' else model)
                  for name in variants}
        return _run(model, models, variants, batch)


def _run(model, models, variants, batch):
    device = next(model.parameters()).device.type
    cfg = model.cfg
    init_default_scope(cfg.get('default_scope', 'densevit'))
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    if batch:
        loader_cfg.batch_size = batch
    loader_cfg.num_workers, loader_cfg.persistent_workers = 0, False
    loader = Runner.build_dataloader(loader_cfg)
    evaluators = {}
    for name in variants:
        evaluators[name] = Evaluator(copy.deepcopy(cfg.test_evaluator))
        evaluators[name].dataset_meta = loader.dataset.metainfo
    times = {name: [] for name in variants}
    with torch.no_grad():
        for i, data in enumerate(loader):
            order = variants if i % 2 == 0 else variants[::-1]
            for name in order:
                batch_data = copy.deepcopy(data)
                with variant_context(name, device):
                    start = time.perf_counter()
                    outputs = models[name].test_step(batch_data)
                    times[name].append(time.perf_counter() - start)
                evaluators[name].process(data_samples=outputs, data_batch=batch_data)
    metrics = {name: evaluators[name].evaluate(len(loader.dataset)) for name in variants}
    return metrics, times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--variants', nargs='+', default=['fp32', 'bf16', 'bf16-naive'],
                   choices=['fp32', 'bf16', 'bf16-naive', 'onnxruntime'])
    p.add_argument('--onnx', help='the exported graph for the onnxruntime variant (default: '
                   'exported from the checkpoint into a temporary folder)')
    p.add_argument('--batch', type=int, help='test batch size (default: the config\'s)')
    p.add_argument('--threads', type=int)
    add_json_argument(p)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = ['fp32'] + [v for v in args.variants if v != 'fp32']
    metrics, times = run(args.config, args.checkpoint, variants, args.batch, args.onnx)
    base = statistics.median(times['fp32'])
    report = {}
    for name in variants:
        med = statistics.median(times[name])
        diff = {k: v - metrics['fp32'][k] for k, v in metrics[name].items()
                if isinstance(v, (int, float))}
        report[name] = dict(metrics=metrics[name], diff_vs_fp32=diff, median_s=med,
                            speedup=base / med)
        shown = ', '.join(f'{k.split("/")[-1]} {v:.4f} ({diff[k]:+.4f})'
                          for k, v in metrics[name].items() if isinstance(v, (int, float)))
        print(f'{name:>10}: {med * 1000:.1f} ms/batch (x{base / med:.2f}); {shown}')
    print(f'{torch.get_num_threads()} threads, {len(times["fp32"])} batches per variant')
    if args.json:
        write_result(args.json, report, config=args.config, checkpoint=args.checkpoint,
                     onnx=args.onnx, batches_per_variant=len(times['fp32']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
