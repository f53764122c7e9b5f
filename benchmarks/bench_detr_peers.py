"""DETR-R50 against MMDetection and Deformable DETR-R50 against Hugging Face, same weights,
one run, interleaved.

    # DETR-R50 vs MMDetection 3.3 (its reference environment, tools/dev/openmmlab_fixtures):
    PYTHONPATH=$PWD:tools/dev/openmmlab_fixtures VENV/bin/python \\
        benchmarks/bench_detr_peers.py --peer mmdet
    # Deformable DETR-R50 vs transformers' DeformableDetrForObjectDetection:
    python benchmarks/bench_detr_peers.py --peer hf [--json FILE]

The peer is built at full size from its own definition (MMDetection's zoo config
``detr_r50_8xb2-150e_coco.py``; transformers' ``DeformableDetrConfig`` with its ResNet-50,
pure-PyTorch attention), its random weights converted into the densevit model of
``configs/detr_resnet50.py`` / ``configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py``
by densevit's own checkpoint converters. The outputs are compared first (max |difference| of
the last decoder layer's logits and boxes: the same function is being timed), then:

- inference: one 800x1066 image (batch 1), model forward and post-processing, no grad,
  eval mode (the data preprocessor is not timed: both normalise the same way);
- training step: two images (800x1066 and 736x1024, padded), forward with the loss, and
  backward (train mode, dropout on as in training; no optimiser step).

Times are medians of ``--repeats`` runs after one warm-up each, the two models' runs
interleaved with the order flipped every repeat (``bench_backbones.timed``); the ratio is
the median of the per-repeat ratios. On a shared machine compare ratios, not milliseconds.
``--json FILE`` writes the printed numbers with the command, commit, CPU and thread count
(``densevit.utils.provenance``).
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

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(800, 1066), (736, 1024)]  # (H, W) of the two training images
NO_PRETRAINED = {'model.backbone.init_cfg': None}


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


def hf_pair(tmp):
    """(densevit Deformable DETR-R50, HF DeformableDetrForObjectDetection, fns)."""
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
    # ... and the backbone trains from its second stage on (the stem and first stage frozen):
    # transformers 5.23 means to, but its rule looks for 'stage.1' in names that read
    # 'stages.1', so it freezes the whole backbone
    for name, param in peer.model.backbone.named_parameters():
        param.requires_grad_(any(f'stages.{i}.' in name for i in (1, 2, 3)))
    ours = _ours('configs/deformable_detr/deformable_detr_r50_16xb2-50e_coco.py',
                 peer.state_dict(), tmp)

    def masks(x, shapes):
        mask = torch.zeros(x.shape[0], *x.shape[-2:], dtype=torch.long)
        for i, (h, w) in enumerate(shapes):
            mask[i, :h, :w] = 1
        return mask

    def labels(shapes):
        out = []
        for h, w in shapes:
            bboxes, cls = _boxes(h, w)
            cxcywh = torch.cat([(bboxes[:, :2] + bboxes[:, 2:]) / 2, bboxes[:, 2:] - bboxes[:, :2]],
                               dim=1) / torch.tensor([w, h, w, h])
            out.append(dict(class_labels=cls, boxes=cxcywh))
        return out

    def last_layer(x, shapes):
        out = peer(pixel_values=x, pixel_mask=masks(x, shapes))
        return out.logits, out.pred_boxes

    def predict(x, shapes):
        out = peer(pixel_values=x, pixel_mask=masks(x, shapes))
        # transformers' own post-processing: sigmoid, top-100 over queries x classes, boxes
        # to pixels (what densevit's predict does after the forward)
        prob = out.logits.sigmoid().flatten(1)
        scores, index = prob.topk(100, dim=1)
        boxes = out.pred_boxes.gather(1, (index // out.logits.shape[2])[..., None].expand(-1, -1, 4))
        return scores, boxes
    return ours, peer, dict(
        peer_outputs=last_layer, peer_predict=predict,
        peer_loss=lambda x, shapes: {'loss': peer(pixel_values=x, pixel_mask=masks(x, shapes),
                                                  labels=labels(shapes)).loss})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--peer', choices=['mmdet', 'hf'], required=True)
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--threads', type=int, help='torch threads (default: torch\'s)')
    p.add_argument('--no-train', action='store_true', help='time inference only')
    add_json_argument(p)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer, fns = (mmdet_pair if args.peer == 'mmdet' else hf_pair)(tmp)
    name = 'DETR-R50' if args.peer == 'mmdet' else 'Deformable DETR-R50'
    peer_name = 'MMDetection 3.3' if args.peer == 'mmdet' else 'HF transformers'
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
                   rows=[])

    def row(what, a, b, ratio):
        results['rows'].append(dict(what=what, densevit_ms=a * 1e3, peer_ms=b * 1e3,
                                    densevit_over_peer=1 / ratio))
        print(f'| {what} | {a * 1e3:.0f} | {b * 1e3:.0f} | {1 / ratio:.2f} |', flush=True)

    row('inference, 1 x 800x1066',
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
