"""DETR-R50 against MMDetection, DETR / Deformable / Conditional / DAB-DETR-R50 against Hugging Face,
same weights, one run, interleaved.

    # DETR-R50 vs MMDetection 3.3 (its reference environment, tools/dev/openmmlab_fixtures):
    PYTHONPATH=$PWD:tools/dev/openmmlab_fixtures VENV/bin/python \\
        benchmarks/bench_detr_peers.py --peer mmdet
    # Deformable DETR-R50 vs transformers' DeformableDetrForObjectDetection:
    python benchmarks/bench_detr_peers.py --peer hf [--json FILE]
    # DETR-R50 / Conditional DETR-R50 / DAB-DETR-R50 vs DetrForObjectDetection /
    # ConditionalDetrForObjectDetection / DabDetrForObjectDetection:
    python benchmarks/bench_detr_peers.py --peer hf --model detr [--json FILE]
    python benchmarks/bench_detr_peers.py --peer hf --model conditional_detr [--json FILE]
    python benchmarks/bench_detr_peers.py --peer hf --model dab_detr [--json FILE]

The peer is built at full size from its own definition (MMDetection's zoo config
``detr_r50_8xb2-150e_coco.py``; transformers' ``DeformableDetrConfig`` / ``DetrConfig`` /
``ConditionalDetrConfig`` / ``DabDetrConfig`` with its ResNet-50, pure-PyTorch attention),
its random weights converted into the densevit model of ``configs/detr_resnet50.py`` /
``configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py`` /
``configs/conditional_detr/conditional_detr_r50_8xb2-50e_coco.py`` /
``configs/dab_detr/dab_detr_r50_8xb2-50e_coco.py`` by densevit's own checkpoint converters
(HF's DETR / Conditional / DAB-DETR: every tensor of HF's model re-drawn (``_redraw``), the model saved
with ``save_pretrained`` and its ``model.safetensors`` loaded by ``init_model``, as a Hub
file would be). The outputs are compared first (max |difference| of the last decoder
layer's logits and boxes: the same function is being timed), then:

- inference: one 800x1066 image (batch 1), model forward and post-processing, no grad,
  eval mode (the data preprocessor is not timed: both normalise the same way);
- training step: two images (800x1066 and 736x1024, padded), forward with the loss, and
  backward (train mode, dropout on as in training; no optimiser step).

``--size H W`` replaces 800x1066 (the second training image scaled alike), e.g. a tiny
size with ``--repeats 1`` to check that the script runs (tests/tools/test_bench_detr_peers.py).

Times are medians of ``--repeats`` runs after one warm-up each, the two models' runs
interleaved with the order flipped every repeat (``bench_backbones.timed``); the ratio is
the median of the per-repeat ratios. On a shared machine compare ratios, not milliseconds.
``--json FILE`` writes the printed numbers with the command, commit, CPU and thread count
(``densevit.utils.provenance``).

HF's Conditional DETR trains with its ``auxiliary_loss=True`` forward (its way to put a loss
on every decoder layer, as densevit's config does), which also feeds each layer's
LayerNorm-ed output to the next (docs/detr_family.md): one LayerNorm more per layer, the
same matching and losses. Its inference, and the comparison, use ``auxiliary_loss=False``
(the paper's function, the Hub files' setting).
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch
from bench_backbones import timed
from mmengine.structures import InstanceData

from densevit.apis import init_model
from densevit.structures import DataSample
from densevit.utils.provenance import add_json_argument, write_result
from densevit.utils.random_init import randomize_

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(800, 1066), (736, 1024)]  # (H, W) of the two training images
NO_PRETRAINED = {'model.backbone.init_cfg': None}
DETECTORS = {  # --model: (name printed, densevit config)
    'detr': ('DETR-R50', 'configs/detr_resnet50.py'),
    'deformable_detr': ('Deformable DETR-R50',
                        'configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py'),
    'conditional_detr': ('Conditional DETR-R50',
                         'configs/conditional_detr/conditional_detr_r50_8xb2-50e_coco.py'),
    'dab_detr': ('DAB-DETR-R50', 'configs/dab_detr/dab_detr_r50_8xb2-50e_coco.py'),
}
PEERS = {'mmdet': ('MMDetection 3.3', ['detr']),
         'hf': ('HF transformers', ['deformable_detr', 'detr', 'conditional_detr', 'dab_detr'])}


def shapes_for(h, w):
    """The two training images' (H, W): ``h x w`` and it scaled as 736x1024 is 800x1066."""
    return [(h, w), (max(1, round(h * 736 / 800)), max(1, round(w * 1024 / 1066)))]


def _boxes(h, w):
    """Three ground-truth boxes (pixels, xyxy) and labels inside an h x w image."""
    boxes = torch.tensor([[0.1, 0.2, 0.5, 0.7], [0.4, 0.1, 0.9, 0.6], [0.2, 0.5, 0.6, 0.95]])
    return boxes * torch.tensor([w, h, w, h]), torch.tensor([3, 17, 42])


def _batch(n):
    """[n, 3, H, W] padded inputs (the first image's size) and the images' (h, w)."""
    H, W = SHAPES[0]
    x = torch.zeros(n, 3, H, W)
    g = torch.Generator().manual_seed(0)
    for i, (h, w) in enumerate(SHAPES[:n]):
        x[i, :, :h, :w] = torch.randn(3, h, w, generator=g)
    return x, SHAPES[:n]


def _ours(config, state_dict, tmp):
    path = Path(tmp) / 'peer.pth'
    torch.save({'state_dict': state_dict, 'meta': {}}, path)
    return init_model(str(ROOT / config), str(path), cfg_options=NO_PRETRAINED)


def _samples(shapes, batch_shape, train, sample_type=DataSample):
    """One ``sample_type`` (densevit's ``DataSample`` or mmdet's ``DetDataSample``) per image,
    with the metainfo both detectors read and, for training, ground-truth boxes."""
    samples = []
    for h, w in shapes:
        ds = sample_type(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=batch_shape,
                                       batch_input_shape=batch_shape, scale_factor=(1.0, 1.0)))
        if train:
            bboxes, labels = _boxes(h, w)
            ds.gt_instances = InstanceData(bboxes=bboxes, labels=labels)
        samples.append(ds)
    return samples


def _train_step(model, loss_fn):
    def step(x):
        losses = loss_fn(x)
        total = sum(v for k, v in losses.items() if 'loss' in k)
        total.backward()
        model.zero_grad(set_to_none=True)
    return step


def mmdet_pair(tmp):
    """(densevit DETR-R50, mmdet DETR-R50, fns) on the same random weights."""
    from common import build, import_openmmlab
    from mmdet.structures import DetDataSample
    from mmengine.config import Config
    _, mmdet = import_openmmlab()
    zoo = Path(mmdet.__file__).parent / '.mim/configs/detr/detr_r50_8xb2-150e_coco.py'
    cfg = Config.fromfile(str(zoo)).model
    cfg.backbone.init_cfg = None
    torch.manual_seed(0)
    peer = build('mmdet', cfg.to_dict())
    peer.init_weights()
    ours = _ours('configs/detr_resnet50.py', peer.state_dict(), tmp)

    def samples(shapes, batch_shape, train):
        return _samples(shapes, batch_shape, train, DetDataSample)

    def last_layer(x, shapes):
        logits, boxes = peer._forward(x, samples(shapes, tuple(x.shape[-2:]), False))
        return logits[-1], boxes[-1]
    return ours, peer, dict(
        peer_outputs=last_layer,
        peer_predict=lambda x, shapes: peer.predict(x, samples(shapes, tuple(x.shape[-2:]),
                                                                False)),
        peer_loss=lambda x, shapes: peer.loss(x, samples(shapes, tuple(x.shape[-2:]), True)))


def _hf_masks(x, shapes):
    """HF's ``pixel_mask``: 1 on each image, 0 on its padding."""
    mask = torch.zeros(x.shape[0], *x.shape[-2:], dtype=torch.long, device=x.device)
    for i, (h, w) in enumerate(shapes):
        mask[i, :h, :w] = 1
    return mask


def _hf_labels(shapes, device='cpu'):
    """HF's ``labels``: the boxes of ``_boxes`` as normalised cxcywh, on ``device``."""
    out = []
    for h, w in shapes:
        bboxes, cls = _boxes(h, w)
        cxcywh = torch.cat([(bboxes[:, :2] + bboxes[:, 2:]) / 2, bboxes[:, 2:] - bboxes[:, :2]],
                           dim=1) / torch.tensor([w, h, w, h])
        out.append(dict(class_labels=cls.to(device), boxes=cxcywh.to(device)))
    return out


def _hf_top_k(out, k):
    """transformers' post-processing of a sigmoid detector: sigmoid, top-``k`` over
    queries x classes, the boxes of those queries (what densevit's predict does after the
    forward)."""
    prob = out.logits.sigmoid().flatten(1)
    scores, index = prob.topk(k, dim=1)
    boxes = out.pred_boxes.gather(1, (index // out.logits.shape[2])[..., None].expand(-1, -1, 4))
    return scores, boxes


def _train_backbone_from_stage_2(peer):
    """The backbone trains from its second stage on (the stem and first stage frozen), as
    densevit's configs (``frozen_stages=1``), the papers' code and mmdet: transformers 5.23
    means to for Deformable / Conditional DETR, but its rule looks for 'stage.1' in names
    that read 'stages.1', so it freezes the whole backbone; its DAB-DETR freezes nothing."""
    for name, param in peer.model.backbone.named_parameters():
        param.requires_grad_(any(f'stages.{i}.' in name for i in (1, 2, 3)))


def _redraw(model, seed=0):
    """Every floating-point tensor of ``model``'s state dict drawn anew (HF's init zeroes
    biases and the box head's last layer, norms are identities: a mis-converted tensor
    could hide there), at scales that keep a full-size ResNet-50 + transformer finite:
    weights N(0, 1 / fan_in), the query embeddings (``nn.Embedding``: object queries,
    DAB-DETR's anchors) N(0, 1) so that the queries predict different things (a mix-up of
    query rows would show), norm scales 1 + 0.1 N(0, 1), running variances 0.5 + |N(0, 1)|,
    everything else (biases, running means, PReLU slopes) 0.1 N(0, 1). Tied tensors
    (DAB-DETR's box head) stay tied."""
    return randomize_(model, seed=seed, scale=0.1, fan_in=True, embedding_scale=1.0)


def hf_pair(tmp, model='deformable_detr'):
    """(densevit model, HF peer, fns) for ``model``: Deformable DETR-R50
    (DeformableDetrForObjectDetection) or, via :func:`hf_conditional_pair`, DETR-R50,
    Conditional DETR-R50 or DAB-DETR-R50."""
    if model != 'deformable_detr':
        return hf_conditional_pair(tmp, model)
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig
    backbone = ResNetConfig(out_features=['stage2', 'stage3', 'stage4'])  # ResNet-50
    # the paper's recipe, as densevit's config (and the official code, and mmdet): dropout 0.1
    # after the FFN activation and in the decoder's self-attention, a loss on every decoder
    # layer; transformers' defaults differ (0, 0, last layer only)
    cfg = DeformableDetrConfig(use_timm_backbone=False, backbone_config=backbone, backbone=None,
                               use_pretrained_backbone=False, num_labels=80,
                               disable_custom_kernels=True, activation_dropout=0.1,
                               attention_dropout=0.1, auxiliary_loss=True)
    torch.manual_seed(0)
    peer = DeformableDetrForObjectDetection(cfg)
    # ... and the backbone trains from its second stage on (the stem and first stage frozen)
    _train_backbone_from_stage_2(peer)
    ours = _ours(DETECTORS['deformable_detr'][1], peer.state_dict(), tmp)

    def last_layer(x, shapes):
        out = peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes))
        return out.logits, out.pred_boxes

    def predict(x, shapes):
        return _hf_top_k(peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes)), 100)
    return ours, peer, dict(
        peer_outputs=last_layer, peer_predict=predict,
        peer_loss=lambda x, shapes: {'loss': peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes),
                                                  labels=_hf_labels(shapes, x.device)).loss})


def hf_conditional_pair(tmp, model):
    """(densevit DETR-R50 / Conditional DETR-R50 / DAB-DETR-R50, HF DetrForObjectDetection /
    ConditionalDetrForObjectDetection / DabDetrForObjectDetection, fns): HF's model at the
    COCO config, its weights re-drawn,
    saved with ``save_pretrained`` and loaded into densevit's COCO config by ``init_model``
    (the HF file converted on load, as a Hub file)."""
    import transformers
    backbone = transformers.ResNetConfig(out_features=['stage4'])  # ResNet-50, stride 32
    common = dict(use_timm_backbone=False, backbone_config=backbone, backbone=None,
                  use_pretrained_backbone=False, num_labels=80)
    if model == 'detr':
        # the paper's dropout 0.1 also on attention weights and after the FFN activation
        # (transformers' defaults: 0, 0), as Conditional DETR below
        cfg = transformers.DetrConfig(**common, attention_dropout=0.1, activation_dropout=0.1,
                                      auxiliary_loss=False)
        peer = transformers.DetrForObjectDetection(cfg)
    elif model == 'conditional_detr':
        # densevit's (the paper's) dropout 0.1 also on attention weights and after the FFN
        # activation (transformers' defaults: 0, 0); auxiliary_loss is switched on for the
        # training step only (module docstring)
        cfg = transformers.ConditionalDetrConfig(**common, attention_dropout=0.1,
                                                 activation_dropout=0.1, auxiliary_loss=False)
        peer = transformers.ConditionalDetrForObjectDetection(cfg)
    else:
        # the paper's: no dropout (transformers' default 0.1 after attention and the FFN),
        # a loss on every decoder layer
        cfg = transformers.DabDetrConfig(**common, dropout=0.0, attention_dropout=0.0,
                                         activation_dropout=0.0, auxiliary_loss=True)
        peer = transformers.DabDetrForObjectDetection(cfg)
    _redraw(peer)
    _train_backbone_from_stage_2(peer)
    peer.save_pretrained(tmp)
    ours = init_model(str(ROOT / DETECTORS[model][1]), str(Path(tmp) / 'model.safetensors'),
                      cfg_options=NO_PRETRAINED)
    num_dets = getattr(ours.bbox_head, 'num_dets', None)  # 100 / 300: the configs' top-k

    def last_layer(x, shapes):
        out = peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes))
        return out.logits, out.pred_boxes

    def predict(x, shapes):
        out = peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes))
        if model == 'detr':  # softmax, the best class but "no object" of every query
            scores, labels = out.logits.softmax(-1)[..., :-1].max(-1)
            return scores, labels, out.pred_boxes
        return _hf_top_k(out, num_dets)

    def loss(x, shapes):
        aux, peer.config.auxiliary_loss = peer.config.auxiliary_loss, True
        try:
            return {'loss': peer(pixel_values=x, pixel_mask=_hf_masks(x, shapes),
                                 labels=_hf_labels(shapes, x.device)).loss}
        finally:
            peer.config.auxiliary_loss = aux
    return ours, peer, dict(peer_outputs=last_layer, peer_predict=predict, peer_loss=loss)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--peer', choices=list(PEERS), required=True)
    p.add_argument('--model', choices=list(DETECTORS),
                   help='default: detr for --peer mmdet, deformable_detr for --peer hf; '
                        'mmdet has detr, hf deformable_detr, detr, conditional_detr, dab_detr')
    p.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'), default=(800, 1066),
                   help='inference image size (default 800 1066; the second training '
                        'image is scaled alike)')
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--threads', type=int, help='torch threads (default: torch\'s)')
    p.add_argument('--no-train', action='store_true', help='time inference only')
    add_json_argument(p)
    args = p.parse_args(argv)
    peer_name, models = PEERS[args.peer]
    model = args.model or models[0]
    if model not in models:
        p.error(f'--peer {args.peer} has --model {", ".join(models)}, not {model}')
    if min(args.size) < 32:
        p.error(f'--size must be at least 32 x 32 (ResNet-50 stride), got {args.size}')
    SHAPES[:] = shapes_for(*args.size)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer, fns = mmdet_pair(tmp) if args.peer == 'mmdet' else hf_pair(tmp, model)
    name = DETECTORS[model][0]
    print(f'{name}, torch {torch.__version__}, threads {torch.get_num_threads()}', flush=True)

    x1, shapes1 = _batch(1)
    ours.eval(), peer.eval()
    with torch.no_grad():
        out = ours(x1, _samples(shapes1, SHAPES[0], False), mode='tensor')
        ref = fns['peer_outputs'](x1, shapes1)
    diffs = [(out['pred_logits'][-1] - ref[0]).abs().max().item(),
             (out['pred_boxes'][-1] - ref[1]).abs().max().item()]
    print(f'same weights: max |logits diff| {diffs[0]:.2e}, max |boxes diff| {diffs[1]:.2e}')
    if max(diffs) > 1e-3:
        sys.exit('the two models disagree: the timings would not compare the same function')

    print(f'| {name} | densevit (ms) | {peer_name} (ms) | densevit / peer |')
    print('|---|---|---|---|')
    results = dict(model=name, peer=peer_name, max_abs_diff=dict(logits=diffs[0], boxes=diffs[1]),
                   sizes=[list(s) for s in SHAPES], rows=[])

    def row(what, a, b, ratio):
        results['rows'].append(dict(what=what, densevit_ms=a * 1e3, peer_ms=b * 1e3,
                                    densevit_over_peer=1 / ratio))
        print(f'| {what} | {a * 1e3:.0f} | {b * 1e3:.0f} | {1 / ratio:.2f} |', flush=True)

    row(f'inference, 1 x {SHAPES[0][0]}x{SHAPES[0][1]}',
        *timed(lambda x: ours(x, _samples(shapes1, SHAPES[0], False), mode='predict'),
               lambda x: fns['peer_predict'](x, shapes1), x1, args.repeats))
    if not args.no_train:
        x2, shapes2 = _batch(2)
        ours.train(), peer.train()
        row('training step, batch 2', *timed(
            _train_step(ours, lambda x: ours(x, _samples(shapes2, SHAPES[0], True),
                                             mode='loss')),
            _train_step(peer, lambda x: fns['peer_loss'](x, shapes2)), x2, args.repeats,
            grad=True))
    if args.json:
        write_result(args.json, results, repeats=args.repeats)


if __name__ == '__main__':
    main()
