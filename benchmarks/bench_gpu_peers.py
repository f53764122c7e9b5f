"""densevit against Hugging Face transformers on one GPU, same weights, interleaved.

    python benchmarks/bench_gpu_peers.py [--models segformer detr deformable_detr
        conditional_detr dab_detr vit] [--precisions tf32 bf16 fp16] [--compile]
        [--repeats 10] [--budget-s 240] [--profile-dir DIR] [--json FILE]
    # the script end to end on the CPU, at tiny sizes (what tests/tools runs):
    python benchmarks/bench_gpu_peers.py --device cpu --tiny --repeats 1

Pairs (full-size models, random weights drawn in HF's model and converted into densevit's
config by densevit's own converters, as ``bench_detr_peers.py`` does):

- SegFormer-B0 (``SegformerForSemanticSegmentation``, 150 classes) against
  ``configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py`` with the paper's
  Linear head (``proj_type='linear'``): 512x512, inference batch 8 (logits upsampled to the
  input and arg-maxed by both), training step batch 8 (cross-entropy at full resolution);
- DETR-R50 (``DetrForObjectDetection``): inference one 800x1066 image, training step batch 4
  (800x1066 and 736x1024 alternating, padded);
- Deformable DETR-R50 (``DeformableDetrForObjectDetection`` with ``disable_custom_kernels``:
  its PyTorch path, against densevit's pure-PyTorch multi-scale deformable attention), the
  same sizes as DETR;
- on request (``--models``): Conditional DETR-R50 and DAB-DETR-R50
  (``ConditionalDetrForObjectDetection`` / ``DabDetrForObjectDetection``), the same sizes;
  and ViT-B/16 (``ViTModel``, config ``image_size`` 512, no pooler) against densevit's
  ``VisionTransformer`` (built and converted as ``bench_backbones.py`` does): 512x512,
  inference batch 8 (the patch-token map), training step batch 8 (the mean square of that
  map as the loss, the same on both sides).

``--compile`` (ViT-B/16 only): both models are wrapped in ``torch.compile`` (default mode)
and the rows are named ``ViT-B/16, torch.compile``; the warm-up calls compile, outside the
timing. The other pairs take data samples and Python-side post-processing through the
call, which ``torch.compile`` would split into many graphs on each side: not a comparison
of the same compiled work, so they are refused with ``--compile``.

First the outputs are compared in float32 with TF32 off, in eval mode (relative error
``|ours - HF| / |HF|`` of the logits and, for detectors, the boxes; over 1e-3 and that model
is not timed: it would not be the same function). Then, per precision:

- ``tf32``: float32 with TF32 matrix products and convolutions (PyTorch's usual GPU setting);
- ``bf16``: ``torch.autocast('cuda', torch.bfloat16)`` around the forward (and the loss),
  TF32 on for what stays float32; backward outside autocast;
- ``fp16`` (on request): the same with float16 (no loss scaling: a timing, not training).

A training step is forward, loss and backward (train mode, dropout on; no optimiser step,
gradients set to None after each). Each timed call is bracketed by
``torch.cuda.synchronize()``; the two models' calls are interleaved, the order flipped every
repeat, after ``--warmup`` calls each. Printed per row: images per second of each (batch over
the median time), densevit's time over HF's (median of the per-repeat ratios) and the peak
memory of each call (``torch.cuda.max_memory_allocated`` after a reset; weights and inputs
included, which both share the size of).

``--budget-s`` stops starting new rows once that many seconds have passed (the JSON is
rewritten after every row, so a run cut short keeps what it measured). ``--profile-dir DIR``:
for each row where densevit is more than 5% slower (``--profile-above``, default 1.05),
``torch.profiler`` over three calls of each model, the top 25 operators by device time
written to ``DIR/profile_<row>.txt``.
"""
import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_backbones import vit_pair as backbone_vit_pair
from bench_detr_peers import ROOT, _batch, _samples, _train_step, hf_pair, shapes_for
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.structures import DataSample
from densevit.utils.memory import peak_cuda_growth
from densevit.utils.provenance import add_json_argument, write_result
from densevit.utils.random_init import randomize_

SEGFORMER = 'configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
NAMES = {'segformer': 'SegFormer-B0', 'detr': 'DETR-R50',
         'deformable_detr': 'Deformable DETR-R50', 'conditional_detr': 'Conditional DETR-R50',
         'dab_detr': 'DAB-DETR-R50', 'vit': 'ViT-B/16'}
DEFAULT_MODELS = ['segformer', 'detr', 'deformable_detr']
AUTOCAST = {'bf16': torch.bfloat16, 'fp16': torch.float16}
MAX_REL_ERR = 1e-3
# a row this much slower than HF gets a profile (SegFormer-B0's half-precision training step
# measured 1.08-1.10 on three leases, under the 1.1 this was before)
PROFILE_ABOVE = 1.05


def rel_err(a, b):
    """``|a - b| / |b|`` (Frobenius norms), in float64."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ------------------------------------------------------------------ the pairs
def segformer_pair(tmp, sizes):
    """(ours, HF, fns, batches) for SegFormer-B0 at ``sizes['seg']`` (H, W)."""
    import transformers
    cfg = transformers.SegformerConfig(num_labels=150)  # B0: widths 32-256, decoder 256
    peer = randomize_(transformers.SegformerForSemanticSegmentation(cfg), seed=0)
    path = Path(tmp) / 'hf_segformer.pth'
    torch.save(peer.state_dict(), path)
    ours = init_model(str(ROOT / SEGFORMER), str(path), cfg_options={
        'model.decode_head.proj_type': 'linear', 'model.backbone.layer_norm_eps': 1e-5,
        'model.backbone.init_cfg': None})
    h, w = sizes['seg']
    n = sizes['seg_batch']
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, h, w, generator=g)
    labels = torch.randint(0, 150, (n, h, w), generator=g)
    labels[:, : h // 8] = 255  # an ignored band, as unlabelled pixels

    def seg_samples(train):
        samples = []
        for i in range(n):
            ds = DataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w)))
            if train:
                ds.gt_sem_seg = PixelData(data=labels[i:i + 1])
            samples.append(ds)
        return samples

    def up(logits, size):
        return torch.nn.functional.interpolate(logits, size=size, mode='bilinear',
                                               align_corners=False)

    def peer_predict(x):
        return up(peer(pixel_values=x).logits, x.shape[-2:]).argmax(1)

    def peer_loss(x):
        return {'loss': peer(pixel_values=x, labels=labels.to(x.device)).loss}

    fns = dict(
        outputs=lambda x: (ours.decode_head(ours.backbone(x)),),
        peer_outputs=lambda x: (peer(pixel_values=x).logits,),
        predict=lambda x: ours(x, _to(seg_samples(False), x.device), mode='predict'),
        peer_predict=peer_predict,
        loss=lambda x: ours(x, _to(seg_samples(True), x.device), mode='loss'),
        peer_loss=peer_loss)
    return ours, peer, fns, dict(infer=x, train=x)


def vit_pair(sizes):
    """(ours, HF, fns, batches) for ViT-B/16 at ``sizes['seg']``, batch ``sizes['seg_batch']``
    (tiny: 2 layers of width 32, as ``bench_backbones.py --tiny``)."""
    h, w = sizes['seg']
    pair = backbone_vit_pair(sizes['tiny'], h)
    ours, peer = pair.ours, pair.hf
    g = torch.Generator().manual_seed(2)
    x = torch.randn(sizes['seg_batch'], 3, h, w, generator=g)

    def ours_map(x):
        return ours(x)[-1]  # [B, D, h/16, w/16], after the final norm

    def peer_map(x):
        return pair.hf_map(peer(pixel_values=x))

    fns = dict(outputs=lambda x: (ours_map(x),), peer_outputs=lambda x: (peer_map(x),),
               predict=ours_map, peer_predict=peer_map,
               loss=lambda x: {'loss': ours_map(x).float().pow(2).mean()},
               peer_loss=lambda x: {'loss': peer_map(x).float().pow(2).mean()})
    return ours, peer, fns, dict(infer=x, train=x)


def detector_pair(tmp, model, sizes):
    """(ours, HF, fns, batches) for DETR-R50 / Deformable DETR-R50: one ``sizes['det']``
    image for inference, ``sizes['det_batch']`` for a training step."""
    ours, peer, peer_fns = hf_pair(tmp, model)
    shapes = shapes_for(*sizes['det'])
    n = sizes['det_batch']
    train_shapes = [shapes[i % 2] for i in range(n)]
    x1, _ = _batch(1)
    x1 = x1[:, :, :shapes[0][0], :shapes[0][1]]
    xn = torch.zeros(n, 3, *shapes[0])
    g = torch.Generator().manual_seed(1)
    for i, (h, w) in enumerate(train_shapes):
        xn[i, :, :h, :w] = torch.randn(3, h, w, generator=g)
    one = [tuple(shapes[0])]

    def outputs(x):
        out = ours(x, _to(_samples(one, tuple(x.shape[-2:]), False), x.device), mode='tensor')
        return out['pred_logits'][-1], out['pred_boxes'][-1]

    fns = dict(
        outputs=outputs,
        peer_outputs=lambda x: peer_fns['peer_outputs'](x, one),
        predict=lambda x: ours(x, _to(_samples(one, tuple(x.shape[-2:]), False), x.device),
                               mode='predict'),
        peer_predict=lambda x: peer_fns['peer_predict'](x, one),
        loss=lambda x: ours(x, _to(_samples(train_shapes, tuple(x.shape[-2:]), True),
                                   x.device), mode='loss'),
        peer_loss=lambda x: peer_fns['peer_loss'](x, train_shapes))
    return ours, peer, fns, dict(infer=x1, train=xn)


def _to(samples, device):
    return [s.to(device) for s in samples]


# ------------------------------------------------------------------ timing
def _sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def timed_pair(fn_a, fn_b, x, repeats, warmup, device):
    """Median seconds and peak MiB of two calls on ``x``, interleaved (A B, B A, ...).

    Returns:
        dict: ``seconds`` (A, B), ``peak_mib`` (A, B; None on the CPU) and ``ratio`` (the
        median of the per-repeat A / B).
    """
    fns = (fn_a, fn_b)
    for fn in fns:
        for _ in range(warmup):
            fn(x)
    times, peaks = ([], []), ([], [])
    for r in range(repeats):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            cuda = device.type == 'cuda'
            with peak_cuda_growth(device) if cuda else contextlib.nullcontext() as mem:
                t = time.perf_counter()
                fns[i](x)
                _sync(device)
                times[i].append(time.perf_counter() - t)
            peaks[i].append(mem.peak_mb if cuda else None)
    return dict(seconds=[statistics.median(t) for t in times],
                peak_mib=[None if p[0] is None else max(p) for p in peaks],
                ratio=statistics.median(a / b for a, b in zip(*times, strict=True)))


def precision_context(precision, device):
    """TF32 on for every precision; ``bf16`` / ``fp16`` add autocast."""
    if device.type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if precision in AUTOCAST:
        return torch.autocast(device.type, dtype=AUTOCAST[precision])
    return contextlib.nullcontext()


def _infer(fn, precision, device):
    def run(x):
        with torch.no_grad(), precision_context(precision, device):
            return fn(x)
    return run


def _train(model, fn, precision, device):
    def loss(x):
        with precision_context(precision, device):
            return fn(x)
    return _train_step(model, loss)


def compare_outputs(ours, peer, fns, x, device):
    """Relative errors of the outputs in float32, TF32 off, eval mode."""
    if device.type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    ours.eval(), peer.eval()
    with torch.no_grad():
        a, b = fns['outputs'](x), fns['peer_outputs'](x)
    return [rel_err(p, q) for p, q in zip(a, b, strict=True)]


def profile(fn_a, fn_b, x, path, device):
    """The top 25 operators by device (else CPU) time of three calls of each."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == 'cuda'
                                           else [])
    key = 'self_cuda_time_total' if device.type == 'cuda' else 'self_cpu_time_total'
    lines = []
    for name, fn in (('densevit', fn_a), ('HF transformers', fn_b)):
        fn(x)
        with torch_profile(activities=activities) as prof:
            for _ in range(3):
                fn(x)
            _sync(device)
        lines += [f'## {name}, 3 calls', prof.key_averages().table(sort_by=key, row_limit=25), '']
    Path(path).write_text('\n'.join(lines))


# ------------------------------------------------------------------ main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--models', nargs='+', choices=list(NAMES), default=DEFAULT_MODELS)
    p.add_argument('--precisions', nargs='+', choices=['tf32', 'bf16', 'fp16'],
                   default=['tf32', 'bf16'])
    p.add_argument('--repeats', type=int, default=10)
    p.add_argument('--warmup', type=int, default=3)
    p.add_argument('--device', default='cuda')
    p.add_argument('--tiny', action='store_true',
                   help='tiny images and batches: the script end to end, not a measurement')
    p.add_argument('--budget-s', type=float, default=240,
                   help='start no new row after this many seconds (default 240)')
    p.add_argument('--profile-dir', help='profile rows where densevit is slower than '
                   '--profile-above times HF')
    p.add_argument('--profile-above', type=float, default=PROFILE_ABOVE,
                   help=f'the ratio above which a row is profiled (default {PROFILE_ABOVE})')
    p.add_argument('--compile', action='store_true',
                   help='torch.compile both models (ViT-B/16 only)')
    add_json_argument(p)
    args = p.parse_args(argv)
    if args.compile and set(args.models) - {'vit'}:
        p.error('--compile is measured for --models vit only: the other pairs pass data '
                'samples and post-processing through the call, which compile splits')
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        sys.exit('no CUDA GPU: torch.cuda.is_available() is False (use --device cpu --tiny '
                 'to check the script on the CPU)')
    sizes = (dict(seg=(64, 64), seg_batch=2, det=(64, 96), det_batch=2) if args.tiny else
             dict(seg=(512, 512), seg_batch=8, det=(800, 1066), det_batch=4))
    sizes['tiny'] = args.tiny
    import transformers
    gpu = torch.cuda.get_device_name(device) if device.type == 'cuda' else None
    results = dict(device=gpu or 'cpu', torch=torch.__version__, cuda=torch.version.cuda,
                   transformers=transformers.__version__, sizes=sizes, compiled=args.compile,
                   rows=[], skipped=[])
    print(f'{gpu or "CPU"}, torch {torch.__version__}, CUDA {torch.version.cuda}, '
          f'transformers {transformers.__version__}', flush=True)
    start = time.perf_counter()
    header = ('| model | step | precision | densevit img/s | HF img/s | densevit / HF time '
              '| densevit peak MiB | HF peak MiB |')
    table = [header, '|---|---|---|---|---|---|---|---|']

    def save():
        if args.json:
            write_result(args.json, results, repeats=args.repeats, warmup=args.warmup)

    for model in args.models:
        if time.perf_counter() - start > args.budget_s:
            results['skipped'].append(dict(model=model, why='budget'))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            ours, peer, fns, batches = (
                segformer_pair(tmp, sizes) if model == 'segformer' else
                vit_pair(sizes) if model == 'vit' else detector_pair(tmp, model, sizes))
        ours.to(device), peer.to(device)
        x_infer, x_train = batches['infer'].to(device), batches['train'].to(device)
        errs = compare_outputs(ours, peer, fns, x_infer, device)
        name = NAMES[model] + (', torch.compile' if args.compile else '')
        if args.compile:  # after the eager comparison; compiled on the first warm-up call
            ours.compile(), peer.compile()
        print(f'{name}: relative error of the outputs (fp32, TF32 off): '
              + ', '.join(f'{e:.1e}' for e in errs), flush=True)
        if max(errs) > MAX_REL_ERR:
            results['skipped'].append(dict(model=model, why=f'outputs differ: {errs}'))
            continue
        for precision in args.precisions:
            for step in ('inference', 'training'):
                if time.perf_counter() - start > args.budget_s:
                    results['skipped'].append(dict(model=model, step=step,
                                                   precision=precision, why='budget'))
                    continue
                if step == 'inference':
                    ours.eval(), peer.eval()
                    a = _infer(fns['predict'], precision, device)
                    b = _infer(fns['peer_predict'], precision, device)
                    x = x_infer
                else:
                    ours.train(), peer.train()
                    a = _train(ours, fns['loss'], precision, device)
                    b = _train(peer, fns['peer_loss'], precision, device)
                    x = x_train
                t = timed_pair(a, b, x, args.repeats, args.warmup, device)
                n = x.shape[0]
                row = dict(model=name, step=f'{step}, batch {n}', precision=precision,
                           size=list(x.shape[-2:]), densevit_img_s=n / t['seconds'][0],
                           hf_img_s=n / t['seconds'][1], densevit_over_hf=t['ratio'],
                           densevit_peak_mib=t['peak_mib'][0], hf_peak_mib=t['peak_mib'][1],
                           rel_err=errs)
                results['rows'].append(row)
                mib = ['-' if m is None else f'{m:.0f}' for m in t['peak_mib']]
                line = (f'| {row["model"]} | {row["step"]} | {precision} | '
                        f'{row["densevit_img_s"]:.1f} | {row["hf_img_s"]:.1f} | '
                        f'{t["ratio"]:.2f} | {mib[0]} | {mib[1]} |')
                table.append(line)
                print(line, flush=True)
                if args.profile_dir and t['ratio'] > args.profile_above:
                    Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
                    prof_file = f'profile_{model}_{step}_{precision}.txt'
                    profile(a, b, x, Path(args.profile_dir) / prof_file, device)
                    row['profile'] = prof_file
                save()
        del ours, peer
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    print('\n'.join(table))
    if results['skipped']:
        print('not measured:', results['skipped'])
    save()
    return 0 if results['rows'] else 1


if __name__ == '__main__':
    sys.exit(main())
