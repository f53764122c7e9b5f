"""MMDetection 3.3 Co-DINO fixture: the query head with the collaborative ATSS head.

Co-DETR lives in MMDetection's ``projects/CO-DETR/codetr/`` (not in the mmdet wheel): put
its ``co_atss_head.py``, ``co_dino_head.py`` and ``transformer.py`` (v3.3.0) in
``$CODETR_REF/codetr/`` or the folder given as first argument (default ``/tmp/codetr_ref``),
as ``make_codetr.py`` says; without them this script says so and writes nothing.

The model: ``make_dino.py``'s ResNet-50 (base width 2) and ``ChannelMapper`` (4 levels,
strides 8 ... 64), Co-DINO's ``CoDINOHead`` (``CoDinoTransformer``: 1 encoder and 2
decoder layers of MMDetection 2's layout, D = 32, 8 queries, 6 DN queries, the quality
focal loss, one auxiliary head's positive-query projection, ``with_coord_feat=False`` as
Co-DINO's configs) and one ``CoATSSHead`` (``make_codetr.py``'s, on 5 levels: the
encoder's 4 and the head's ``downsample``), every tensor random, saved as Co-DINO's
``CoDETR`` names them (``backbone``, ``neck``, ``query_head``, ``bbox_head.0``). Run as
MMDetection's ``CoDETR`` runs them without LSJ (each image keeps its own ``img_shape``):

- eval, on ``make_dino.py``'s padded batch of two sizes: every decoder layer's logits and
  boxes, the detections;
- a training step on that batch with ground truth: ``query_head.loss`` (DINO's losses;
  its denoising draws recorded as ``make_dino.py`` records them), the ATSS head's losses
  on the query head's encoder maps (``*0``), ``query_head.loss_aux`` with the ATSS head's
  positives (``*_aux0``; what ``torch.randperm`` gave, per call: ``perms``), and every
  parameter's gradient of the losses' sum.
"""
import contextlib
import os
import sys

import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions
from make_codetr import head_cfg as atss_cfg
from make_codetr import import_codetr
from make_deformable_detr import SCALE, batch
from make_dino import GT, SIZES, dn_recorder, model_cfg, with_gt
from mmengine.config import ConfigDict
from torch import nn

from densevit.utils.random_init import randomize_

D, QUERIES, DN_QUERIES, DETS = 32, 8, 6, 10
QFL = dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0, loss_weight=1.0)


def transformer_cfgs():
    """Co-DETR's transformers in MMDetection 2's layout, made tiny: the encoder (1 layer) and
    a decoder layer."""
    msda = dict(type='MultiScaleDeformableAttention', embed_dims=D, num_heads=2, num_levels=4,
                num_points=2, dropout=0.0)
    # mmcv 2's layers take the FFN's width from ffn_cfgs (its default embed_dims is 256)
    ffn = dict(type='FFN', embed_dims=D, feedforward_channels=2 * D, num_fcs=2, ffn_drop=0.0,
               act_cfg=dict(type='ReLU', inplace=True))
    layer = dict(feedforward_channels=2 * D, ffn_dropout=0.0, ffn_cfgs=ffn)
    encoder = dict(type='DetrTransformerEncoder', num_layers=1, transformerlayers=dict(
        type='BaseTransformerLayer', attn_cfgs=msda,
        operation_order=('self_attn', 'norm', 'ffn', 'norm'), **layer))
    decoder_layer = dict(
        type='DetrTransformerDecoderLayer',
        attn_cfgs=[dict(type='MultiheadAttention', embed_dims=D, num_heads=2, dropout=0.0), msda],
        operation_order=('self_attn', 'norm', 'cross_attn', 'norm', 'ffn', 'norm'), **layer)
    return encoder, decoder_layer


HUNGARIAN = dict(assigner=dict(type='HungarianAssigner', match_costs=[
    dict(type='FocalLossCost', weight=2.0), dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
    dict(type='IoUCost', iou_mode='giou', weight=2.0)]))


def query_head_cfg():
    """Co-DINO's ``CoDINOHead`` as its config builds it, made tiny."""
    encoder, decoder_layer = transformer_cfgs()
    return dict(
        type='CoDINOHead', num_query=QUERIES, num_classes=3, in_channels=2048,
        as_two_stage=True,
        dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0,
                    group_cfg=dict(dynamic=True, num_groups=None, num_dn_queries=DN_QUERIES)),
        transformer=dict(
            type='CoDinoTransformer', with_coord_feat=False, num_co_heads=1,
            num_feature_levels=4, encoder=encoder,
            decoder=dict(type='DinoTransformerDecoder', num_layers=2, return_intermediate=True,
                         transformerlayers=decoder_layer)),
        positional_encoding=dict(type='SinePositionalEncoding', num_feats=D // 2,
                                 temperature=20, normalize=True),
        loss_cls=dict(QFL), loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0), train_cfg=HUNGARIAN,
        test_cfg=dict(max_per_img=DETS))


def build_model(head_cfg=query_head_cfg):
    """backbone, neck (``make_dino.py``'s), query_head (``head_cfg()``), bbox_head (a
    ModuleList) and mmdet's data preprocessor, as ``CoDETR`` holds them."""
    dino = model_cfg()
    model = nn.Module()
    model.data_preprocessor = build('mmdet', dino['data_preprocessor'])
    model.backbone = build('mmdet', dino['backbone'])
    dino['neck']['out_channels'] = D
    model.neck = build('mmdet', dino['neck'])
    # a ConfigDict, as from a config file: CoDINOHead reads ``positional_encoding.num_feats``
    # of its config as an attribute
    model.query_head = build('mmdet', ConfigDict(head_cfg()))
    atss = dict(atss_cfg(), in_channels=D, feat_channels=D)
    model.bbox_head = nn.ModuleList([build('mmdet', atss)])
    return model.eval(), dict(backbone=dino['backbone'], neck=dino['neck'],
                              query_head=head_cfg(), bbox_head=[atss])


def evaluate(model, images, samples):
    data = model.data_preprocessor(dict(inputs=images, data_samples=samples), False)
    metas = [s.metainfo for s in data['data_samples']]
    with torch.no_grad():
        x = model.neck(model.backbone(data['inputs']))
        logits, boxes = model.query_head(x, metas)[:2]
        preds = model.query_head.predict(x, data['data_samples'])
    return dict(logits=logits, boxes=boxes, det_bboxes=[p.bboxes for p in preds],
                det_scores=[p.scores for p in preds], det_labels=[p.labels for p in preds])


def train_step(model, images, samples):
    """``CoDETR.loss`` without LSJ, one ATSS head: the query head's losses (DINO's, its
    denoising draws recorded), the ATSS head's (``*0``), its positive queries'
    (``*_aux0``)."""
    record, perms = {}, []
    randperm, cuda = torch.randperm, torch.Tensor.cuda

    def recorded_randperm(n, *args, **kwargs):
        perms.append(randperm(n, *args, **kwargs))
        return perms[-1]
    model.train()
    data = model.data_preprocessor(dict(inputs=images, data_samples=samples), True)
    samples = data['data_samples']
    torch.manual_seed(1234)
    dn = model.query_head.dn_generator
    with dn_recorder(dn, record) if dn is not None else contextlib.nullcontext():
        x = model.neck(model.backbone(data['inputs']))
        losses, enc_maps = model.query_head.loss(x, samples)
    atss = model.bbox_head[0].loss(enc_maps, samples)
    pos_coords = atss.pop('pos_coords')
    losses.update({f'{k}0': sum(v) for k, v in atss.items()})
    torch.randperm, torch.Tensor.cuda = recorded_randperm, lambda self, *a, **k: self
    try:
        aux = model.query_head.loss_aux(enc_maps, pos_coords, 0, samples)
    finally:
        torch.randperm, torch.Tensor.cuda = randperm, cuda
    losses.update({f'{k}0': v for k, v in aux.items()})
    model.zero_grad()
    sum(losses.values()).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.eval()
    return dict(losses={k: v.detach() for k, v in losses.items()}, perms=perms, grads=grads,
                **record)


def random_model(head_cfg, seed):
    """:func:`build_model` with every tensor drawn from ``seed`` but the data
    preprocessor's mean / std -> (model, its configs)."""
    model, cfg = build_model(head_cfg)
    norm = [t.clone() for t in model.data_preprocessor.buffers()]
    randomize_(model, seed=seed)
    for t, kept in zip(model.data_preprocessor.buffers(), norm, strict=True):
        t.copy_(kept)
    return model, cfg


def record(model, seed, step=train_step):
    """The fixture's inputs (a padded batch of two sizes, its ground truth) and the model's
    outputs: ``evaluate``'s and ``step``'s."""
    images, samples = batch(SIZES, seed=10 + seed)
    inputs = dict(images=images, sizes=torch.tensor(SIZES), scale=SCALE,
                  gt_bboxes=[b for b, _ in GT], gt_labels=[c for _, c in GT])
    outputs = dict(eval=evaluate(model, images, samples),
                   train=step(model, images, with_gt(batch(SIZES, seed=10 + seed)[1])))
    return inputs, outputs


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('CODETR_REF', '/tmp/codetr_ref')
    import_openmmlab()
    names = ('co_atss_head', 'transformer', 'co_dino_head')
    if any(import_codetr(folder, n) is None for n in names):
        print(f'make_codino.py: skipped, no {folder}/codetr/{{{",".join(names)}}}.py '
              f"(MMDetection v3.3.0's projects/CO-DETR/codetr; see this script's docstring)")
        return
    name, seed = 'mmdet_codino', 0
    model, cfg = random_model(query_head_cfg, seed)
    save_like_mmengine(model, name, cfg, 'mmdet', dict(classes=('a', 'b', 'c')))
    inputs, outputs = record(model, seed)
    save_io(name, dict(padded=inputs), outputs,
            f'mmdet Co-DINO (projects/CO-DETR CoDINOHead + CoATSSHead), ResNet-50 (base '
            f'width 2), D={D}, {QUERIES} queries, {DN_QUERIES} DN queries; eval outputs and '
            f'one training step; {versions()}')


if __name__ == '__main__':
    main()
