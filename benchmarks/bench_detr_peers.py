"""DETR-R50 and DINO-4scale-R50 against MMDetection, DETR / Deformable / Conditional / DAB-DETR-R50
against Hugging Face, same weights, one run, interleaved.

    # DETR-R50 / DINO-4scale-R50 vs MMDetection 3.3 (its reference environment,
    # tools/dev/openmmlab_fixtures):
    PYTHONPATH=$PWD:tools/dev/openmmlab_fixtures VENV/bin/python \\
        benchmarks/bench_detr_peers.py --peer mmdet [--model dino] [--json FILE]
    # Deformable DETR-R50 vs transformers' DeformableDetrForObjectDetection:
    python benchmarks/bench_detr_peers.py --peer hf [--json FILE]
    # DETR-R50 / Conditional DETR-R50 / DAB-DETR-R50 vs DetrForObjectDetection /
    # ConditionalDetrForObjectDetection / DabDetrForObjectDetection:
    python benchmarks/bench_detr_peers.py --peer hf --model detr [--json FILE]
    python benchmarks/bench_detr_peers.py --peer hf --model conditional_detr [--json FILE]
    python benchmarks/bench_detr_peers.py --peer hf --model dab_detr [--json FILE]

The peer is built at full size from its own definition (MMDetection's zoo configs
``detr_r50_8xb2-150e_coco.py`` / ``dino-4scale_r50_8xb2-12e_coco.py``: 900 queries, 80 classes,
contrastive denoising with 100 DN queries; transformers' ``DeformableDetrConfig`` /
``DetrConfig`` / ``ConditionalDetrConfig`` / ``DabDetrConfig`` with its ResNet-50, pure-PyTorch
attention), its random weights converted into the densevit model of ``configs/detr_resnet50.py`` /
``configs/dino/dino-4scale_r50_8xb2-12e_coco.py`` /
``configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py`` /
``configs/conditional_detr/conditional_detr_r50_8xb2-50e_coco.py`` /
``configs/dab_detr/dab_detr_r50_8xb2-50e_coco.py`` by densevit's own checkpoint converters
(HF's DETR / Conditional / DAB-DETR: every tensor of HF's model re-drawn (``_redraw``), the model saved
with ``save_pretrained`` and its ``model.safetensors`` loaded by ``init_model``, as a Hub
file would be; MMDetection's DINO: every tensor re-drawn alike, its own initialisation
zeroing the box branches' last layers). The outputs are compared first in eval mode
(max |difference| of the last decoder layer's logits and boxes: the same function is
being timed; over 1e-4 for DINO, 1e-3 for the others, the pair is reported and not
timed; DINO's comparison ranks densevit's encoder proposals by mmdet's scores, after
checking that its own agree, so that a near-tie in the top-900 is not a difference), then:

- inference: one 800x1066 image (batch 1), model forward and post-processing, no grad,
  eval mode (the data preprocessor is not timed: both normalise the same way);
- training step: two images (800x1066 and 736x1024, padded), forward with the loss, and
  backward (train mode, dropout on as in training; no optimiser step). DINO's contrastive
  denoising queries are drawn by each model from its own generator (the same targets, the
  same group count and query count, different noise).

``--size H W`` replaces 800x1066 (the second training image scaled alike), e.g. a tiny
size with ``--repeats 1`` to check that the script runs (tests/tools/test_bench_detr_peers.py).
DINO picks its 900 queries among the pixels of its 4 maps (strides 8-64), which a tiny size
lacks: ``--queries N`` gives both models N (``--size 64 96 --queries 100 --repeats 1`` runs
the pair end to end in seconds).

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
import contextlib
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
    'dino': ('DINO-4scale-R50', 'configs/dino/dino-4scale_r50_8xb2-12e_coco.py'),
}
MMDET_ZOO = {'detr': 'detr/detr_r50_8xb2-150e_coco.py',  # under mmdet's .mim/configs
             'dino': 'dino/dino-4scale_r50_8xb2-12e_coco.py'}
MAX_DIFF = {'dino': 1e-4}  # the outputs' largest difference allowed before timing; others 1e-3
PEERS = {'mmdet': ('MMDetection 3.3', ['detr', 'dino']),
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


def _ours(config, state_dict, tmp, cfg_options=None):
    """densevit's model of ``config`` (repository-relative) with the peer's ``state_dict``,
    saved as an mmengine checkpoint and loaded (converted) by ``init_model``;
    ``cfg_options`` default: no pretrained backbone."""
    path = Path(tmp) / 'peer.pth'
    torch.save({'state_dict': state_dict, 'meta': {}}, path)
    return init_model(str(ROOT / config), str(path), cfg_options=cfg_options or NO_PRETRAINED)


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


def mmdet_pair(tmp, model='detr', queries=None):
    """(densevit model, mmdet model, fns) on the same random weights: DETR-R50 with mmdet's
    own initialisation, or DINO-4scale-R50 with every tensor re-drawn (:func:`_redraw`:
    mmdet's initialisation zeroes the box branches' last layers, so that every decoder
    layer would return its reference boxes). mmdet's model is its zoo config's
    (:data:`MMDET_ZOO`), the weights converted by densevit's converter on load; ``queries``
    replaces DINO's 900 matching queries in both."""
    from common import build, import_openmmlab
    from mmdet.structures import DetDataSample
    from mmengine.config import Config
    _, mmdet = import_openmmlab()
    zoo = Path(mmdet.__file__).parent / '.mim/configs' / MMDET_ZOO[model]
    cfg = Config.fromfile(str(zoo)).model
    cfg.backbone.init_cfg = None
    options = dict(NO_PRETRAINED)
    if queries:
        cfg.num_queries = options['model.bbox_head.num_queries'] = queries
    torch.manual_seed(0)
    peer = build('mmdet', cfg.to_dict())
    if model == 'dino':
        _redraw(peer)
    else:
        peer.init_weights()
    ours = _ours(DETECTORS[model][1], peer.state_dict(), tmp, options)

    def samples(shapes, batch_shape, train):
        return _samples(shapes, batch_shape, train, DetDataSample)

    scores = []  # DINO: the encoder's proposal scores of mmdet's last comparison forward

    def last_layer(x, shapes):
        scores.clear()
        hook = peer.bbox_head.cls_branches[-1].register_forward_hook(  # DINO's encoder branch
            lambda m, args, out: scores.append(out.max(-1)[0])) if model == 'dino' else None
        try:
            logits, boxes = peer._forward(x, samples(shapes, tuple(x.shape[-2:]), False))
        finally:
            if hook is not None:
                hook.remove()
        return logits[-1], boxes[-1]

    @contextlib.contextmanager
    def ranked_as_peer():
        """DINO: densevit picks its queries by mmdet's proposal scores (the max |difference|
        from its own is yielded, and checked with the outputs): at 800x1066 (900 of 17,821
        pixels) adjacent scores lay 2.4e-7 apart where the two models' float32 scores
        differed by 4.3e-6, and without this two pairs of queries swapped ranks and the
        logits differed by 0.85; with it by 1.4e-5."""
        head, diff = ours.bbox_head, {}

        def score(logits):
            own = type(head).proposal_score(head, logits)
            diff['proposal_scores'] = (own - scores[-1]).abs().max().item()
            return scores[-1]
        head.proposal_score = score
        try:
            yield diff
        finally:
            del head.proposal_score
    return ours, peer, dict(
        peer_outputs=last_layer, **(dict(ranked_as_peer=ranked_as_peer) if model == 'dino' else {}),
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


def compare(ours, peer, fns, x, shapes):
    """Max |difference| of the two models' last decoder layer (eval mode) on ``x``:
    {'logits', 'boxes'} and what ``fns['ranked_as_peer']`` (DINO) adds."""
    ours.eval(), peer.eval()
    with torch.no_grad():
        ref = fns['peer_outputs'](x, shapes)
        with fns.get('ranked_as_peer', lambda: contextlib.nullcontext({}))() as more:
            out = ours(x, _samples(shapes, tuple(x.shape[-2:]), False), mode='tensor')
    return dict(logits=(out['pred_logits'][-1] - ref[0]).abs().max().item(),
                boxes=(out['pred_boxes'][-1] - ref[1]).abs().max().item(), **more)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--peer', choices=list(PEERS), required=True)
    p.add_argument('--model', choices=list(DETECTORS),
                   help='default: detr for --peer mmdet, deformable_detr for --peer hf; '
                        'mmdet has detr, dino, hf deformable_detr, detr, conditional_detr, '
                        'dab_detr')
    p.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'), default=(800, 1066),
                   help='inference image size (default 800 1066; the second training '
                        'image is scaled alike)')
    p.add_argument('--queries', type=int,
                   help="DINO's matching queries in both models (default 900, the zoo's): "
                        'fewer for a quick check at a tiny --size')
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
    if args.queries and model != 'dino':
        p.error('--queries is for --model dino')
    if model == 'dino':  # two-stage: the queries are chosen among the 4 maps' pixels
        queries = args.queries or 900
        pixels = sum(-(-args.size[0] // 2 ** k) * -(-args.size[1] // 2 ** k) for k in range(3, 7))
        if queries > pixels:
            p.error(f'--size {args.size[0]} {args.size[1]} gives DINO {pixels} pixels to choose '
                    f'{queries} queries among: a larger --size or fewer --queries')
    SHAPES[:] = shapes_for(*args.size)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer, fns = (mmdet_pair(tmp, model, args.queries) if args.peer == 'mmdet'
                           else hf_pair(tmp, model))
    name = DETECTORS[model][0]
    print(f'{name}, torch {torch.__version__}, threads {torch.get_num_threads()}', flush=True)

    x1, shapes1 = _batch(1)
    diffs = compare(ours, peer, fns, x1, shapes1)
    print('same weights: ' + ', '.join(f'max |{k} diff| {v:.2e}' for k, v in diffs.items()))
    if max(diffs.values()) > MAX_DIFF.get(model, 1e-3):
        sys.exit(f'the two models disagree (over {MAX_DIFF.get(model, 1e-3):.0e}): '
                 'the timings would not compare the same function')

    print(f'| {name} | densevit (ms) | {peer_name} (ms) | densevit / peer |')
    print('|---|---|---|---|')
    results = dict(model=name, peer=peer_name, max_abs_diff=diffs,
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
