"""UperNet-Swin-T against MMSegmentation and Hugging Face, same weights, one run, interleaved.

    # vs MMSegmentation 1.2.2 (its reference environment, tools/dev/openmmlab_fixtures):
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD:tools/dev/openmmlab_fixtures .venv-openmmlab/bin/python \\
        benchmarks/bench_upernet_peers.py --peer mmseg [--repeats 5] [--threads 1] [--json FILE]
    # vs transformers' UperNetForSemanticSegmentation on a SwinBackbone (the work venv):
    OMP_NUM_THREADS=1 python benchmarks/bench_upernet_peers.py --peer hf [--json FILE]
    # end to end on tiny widths in seconds (a check, not a measurement; tests/tools):
    python benchmarks/bench_upernet_peers.py --peer hf --tiny

The model is ``configs/upernet/upernet_swin_t_512x512_ade20k.py``'s: Swin-T (96 wide, depths
2/2/6/2, window 7, every second block shifted), ``UPerHead`` (pool scales 1, 2, 3, 6, 512
wide) on the four stages and an ``FCNHead`` (one conv, 256 wide, loss weight 0.4) on stage 3,
150 classes. The peer is built at that size from its own definition:

- ``mmseg``: MMSegmentation's zoo config
  ``swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py`` through its
  registry (no pretrained file; drop path 0.3, head dropout 0.1, as densevit's config);
- ``hf``: ``UperNetForSemanticSegmentation(UperNetConfig(backbone_config=SwinConfig(...)))``
  at Swin-T's sizes, 150 labels, drop path 0.3 (densevit's; transformers' default 0.1).
  HF's heads have no dropout, so densevit's heads run with ``dropout_ratio=0`` here.

Both sides' norms in the heads are plain ``BN`` (the configs' ``SyncBN`` is BN on one
process). Every saved tensor of the peer is drawn at random (``bench_backbones.random_``),
and densevit's model is loaded from it by ``init_model`` through densevit's own converter
(``densevit/checkpoint/upernet.py``): mmseg's state dict saved as mmengine saves it, HF's
model saved with ``save_pretrained`` and its ``model.safetensors`` read as a Hub file.

Compared first, in eval mode: the decode logits at the head's stride 4 of one image (max
|difference| over max |peer|) and the loss of the training batch (decode + 0.4 x auxiliary
cross-entropy, relative difference); over 1e-4 and the pair is reported, not timed (exit 1).
Then, interleaved (order flipped every repeat, one warm-up each; ``bench_backbones.timed``):

- inference: one ``--size`` image (512x512), eval mode, no grad, whole image: the decode
  logits at stride 4 (densevit's and mmseg's ``mode='tensor'``; HF's
  ``decode_head(backbone(x).feature_maps)``, the same function: HF's ``forward`` also runs
  the auxiliary head and resizes both to the input, work the other two do not do);
- training step: two images and the same random labels (150 classes, none ignored), train
  mode (drop path and dropout on), forward with the losses (logits resized to the labels)
  and backward; no optimiser step on either side.

Times are medians of ``--repeats``; the ratio is densevit's time over the peer's (from the
median of the per-repeat ratios). On a shared machine compare ratios, not milliseconds.
``--threads`` sets torch's threads (default 1). ``--json FILE`` writes the printed numbers
with the command, commit, CPU and thread count (``densevit.utils.provenance``). ``--tiny``:
Swin 16 wide (depths 2/2/2/2, heads 1/2/2/4), heads 32 / 16 wide, 150 classes, 64x64 unless
``--size`` is given: the whole script in seconds (its times meaningless).
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch
from bench_backbones import MAX_REL_ERR, max_rel_err, random_, timed
from bench_detr_peers import _ours, _train_step
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.structures import DataSample
from densevit.utils.provenance import add_json_argument, write_result

CONFIG = 'configs/upernet/upernet_swin_t_512x512_ade20k.py'
MMSEG_ZOO = 'swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
CLASSES = 150
BN = dict(type='BN', requires_grad=True)
# Swin width, depths, heads; the UPerHead's and the FCN head's widths
SIZES = {False: dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
                     channels=512, aux_channels=256),
         True: dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4],
                    channels=32, aux_channels=16)}
PEERS = {'mmseg': 'MMSegmentation 1.2.2', 'hf': 'HF transformers'}


def _widths(s):
    return [s['embed_dims'] * 2 ** i for i in range(len(s['depths']))]


def densevit_options(s, head_dropout=True):
    """``cfg_options`` on densevit's config for the sizes ``s``: no pretrained file, BN in
    the heads and, without ``head_dropout``, no dropout before their classifiers."""
    widths = _widths(s)
    options = {
        'model.backbone.init_cfg': None,
        'model.backbone.arch': dict(_delete_=True, embed_dims=s['embed_dims'],
                                    depths=s['depths'], num_heads=s['num_heads']),
        'model.decode_head.in_channels': widths, 'model.decode_head.channels': s['channels'],
        'model.auxiliary_head.in_channels': widths[2],
        'model.auxiliary_head.channels': s['aux_channels']}
    for head in ('decode_head', 'auxiliary_head'):
        options[f'model.{head}.norm_cfg'] = BN
        if not head_dropout:
            options[f'model.{head}.dropout_ratio'] = 0.0
    return options


def _samples(labels):
    """densevit ``DataSample``s with ``labels`` [B, H, W] as ``gt_sem_seg``."""
    shape = tuple(labels.shape[-2:])
    return [DataSample(gt_sem_seg=PixelData(data=lab[None]),
                       metainfo=dict(img_shape=shape, ori_shape=shape)) for lab in labels]


def mmseg_pair(s, tmp):
    """(densevit model, mmseg ``EncoderDecoder``, peer fns) on the same random weights."""
    from common import build, import_openmmlab, seg_samples
    from mmengine.config import Config
    mmseg, _ = import_openmmlab()
    cfg = Config.fromfile(str(Path(mmseg.__file__).parent / '.mim/configs' / MMSEG_ZOO)).model
    cfg.backbone.update(init_cfg=None, embed_dims=s['embed_dims'], depths=s['depths'],
                        num_heads=s['num_heads'])
    widths = _widths(s)
    cfg.decode_head.update(in_channels=widths, channels=s['channels'], norm_cfg=BN)
    cfg.auxiliary_head.update(in_channels=widths[2], channels=s['aux_channels'], norm_cfg=BN)
    peer = random_(build('mmseg', cfg.to_dict()))
    ours = _ours(CONFIG, peer.state_dict(), tmp, densevit_options(s))

    def loss(x, labels):
        shapes = torch.tensor([list(labels.shape[-2:])] * len(labels))
        return peer.loss(x, seg_samples(x, shapes, shapes, labels))
    return ours, peer, dict(logits=lambda x: peer(x, mode='tensor'), loss=loss)


def hf_pair(s, tmp):
    """(densevit model, HF ``UperNetForSemanticSegmentation``, peer fns), same weights."""
    import transformers
    swin = transformers.SwinConfig(
        embed_dim=s['embed_dims'], depths=s['depths'], num_heads=s['num_heads'], window_size=7,
        drop_path_rate=0.3, out_features=['stage1', 'stage2', 'stage3', 'stage4'])
    cfg = transformers.UperNetConfig(backbone_config=swin, hidden_size=s['channels'],
                                     auxiliary_channels=s['aux_channels'], num_labels=CLASSES,
                                     use_auxiliary_head=True)
    peer = random_(transformers.UperNetForSemanticSegmentation(cfg))
    peer.save_pretrained(tmp)
    ours = init_model(str(Path(__file__).resolve().parents[1] / CONFIG),
                      str(Path(tmp) / 'model.safetensors'),
                      cfg_options=densevit_options(s, head_dropout=False))
    return ours, peer, dict(
        logits=lambda x: peer.decode_head(peer.backbone(x).feature_maps),
        loss=lambda x, labels: {'loss': peer(pixel_values=x, labels=labels).loss})


def total_loss(losses):
    return sum(v for k, v in losses.items() if 'loss' in k)


def compare(ours, fns, x1, x2, labels):
    """Eval mode: the decode logits of ``x1`` and the loss of (``x2``, ``labels``), densevit's
    against the peer's: {what: (max |difference|, relative difference)}."""
    with torch.no_grad():
        a, b = ours(x1, mode='tensor'), fns['logits'](x1)
        la, lb = total_loss(ours(x2, _samples(labels), mode='loss')), total_loss(
            fns['loss'](x2, labels))
    return dict(logits=((a - b).abs().max().item(), max_rel_err(a, b)),
                loss=(abs(la - lb).item(), max_rel_err(la, lb)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--peer', choices=list(PEERS), required=True)
    p.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'),
                   help='image size (default 512 512; with --tiny 64 64)')
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--threads', type=int, default=1, help='torch threads (default 1)')
    p.add_argument('--tiny', action='store_true',
                   help='tiny widths and 64x64: a quick end-to-end check (times meaningless)')
    add_json_argument(p)
    args = p.parse_args(argv)
    size = tuple(args.size or ((64, 64) if args.tiny else (512, 512)))
    if min(size) < 32:
        p.error(f'--size must be at least 32 x 32 (the Swin stride), got {size[0]} x {size[1]}')
    if args.repeats < 1 or args.threads < 1:
        p.error('--repeats and --threads must be at least 1')
    try:  # the peer's library, before anything is built
        for module in (('mmseg', 'common') if args.peer == 'mmseg' else ('transformers',)):
            __import__(module)
    except ImportError as e:
        where = ('the OpenMMLab reference environment, with PYTHONPATH=$PWD:'
                 'tools/dev/openmmlab_fixtures (tools/dev/openmmlab_fixtures/README.md)'
                 if args.peer == 'mmseg' else 'an environment with transformers')
        p.error(f'--peer {args.peer} runs in {where}: {e}')
    torch.set_num_threads(args.threads)
    s = SIZES[args.tiny]
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer, fns = (mmseg_pair if args.peer == 'mmseg' else hf_pair)(s, tmp)
    name, peer_name = 'UperNet-Swin-T' + (' (--tiny widths)' if args.tiny else ''), \
        PEERS[args.peer]
    print(f'{name}, {CLASSES} classes, vs {peer_name}; torch {torch.__version__}, '
          f'threads {torch.get_num_threads()}', flush=True)

    g = torch.Generator().manual_seed(1)
    x1, x2 = torch.randn(1, 3, *size, generator=g), torch.randn(2, 3, *size, generator=g)
    labels = torch.randint(0, CLASSES, (2, *size), generator=g)
    ours.eval(), peer.eval()
    diffs = compare(ours, fns, x1, x2, labels)
    print('same weights (eval): ' + ', '.join(
        f'{k} max |diff| {a:.2e} (relative {r:.1e})' for k, (a, r) in diffs.items()))
    results = dict(model=name, peer=peer_name, tiny=args.tiny, size=list(size),
                   threads=torch.get_num_threads(),
                   max_abs_diff={k: a for k, (a, _) in diffs.items()},
                   max_rel_err={k: r for k, (_, r) in diffs.items()}, rows=[])
    if not all(r <= MAX_REL_ERR for _, r in diffs.values()):  # NaN included
        if args.json:
            write_result(args.json, results, repeats=args.repeats)
        sys.exit(f'densevit and {peer_name} differ by more than {MAX_REL_ERR:g} (relative): '
                 'not the same function, not timed')

    print(f'| {name} | densevit (ms) | {peer_name} (ms) | densevit / peer |')
    print('|---|---|---|---|')

    def row(what, a, b, ratio):
        results['rows'].append(dict(what=what, densevit_ms=a * 1e3, peer_ms=b * 1e3,
                                    densevit_over_peer=1 / ratio))
        print(f'| {what} | {a * 1e3:.1f} | {b * 1e3:.1f} | {1 / ratio:.2f} |', flush=True)

    row(f'inference, 1 x {size[0]}x{size[1]}',
        *timed(lambda x: ours(x, mode='tensor'), fns['logits'], x1, args.repeats))
    ours.train(), peer.train()
    samples = _samples(labels)
    row(f'training step, 2 x {size[0]}x{size[1]}', *timed(
        _train_step(ours, lambda x: ours(x, samples, mode='loss')),
        _train_step(peer, lambda x: fns['loss'](x, labels)), x2, args.repeats, grad=True))
    if args.json:
        write_result(args.json, results, repeats=args.repeats)


if __name__ == '__main__':
    main()
