"""MMDetection 3.x DINO fixture: eval outputs, and one training step's losses with the
contrastive denoising draws recorded.

The model is mmdet's own ``DINO`` (ResNet-50 at base width 2, ``ChannelMapper`` with an
extra stride-2 level: 4 levels, ``DINOHead``) at embed_dims 16, every tensor randomised.
Saved as ``make_deformable_detr.py`` saves its models (checkpoint, padded batch of two
sizes and one image of a third size, eval mode: backbone / neck maps, per-layer logits and
boxes, ``predict``'s detections), plus a ``train`` case: the padded batch with ground-truth
boxes, mmdet's losses of ``model.loss`` under a fixed seed, and what the denoising drew:
the noised labels (``dn_labels``, the label embedding's input) and noised boxes
(``dn_boxes``: clamped cxcywh, before ``inverse_sigmoid``), both in mmdet's flat order
(2·groups repetitions of every box of the batch: positives of group g at repetition 2g,
negatives at 2g+1), the batched DN queries (``dn_label_query``, ``dn_bbox_query``), the
attention mask and the group count; the head's per-layer outputs the losses read, and
every parameter's gradient of the losses' sum (``grads``, mmdet's names).

mmdet's ``coordinate_to_encoding`` (the decoder's query positions) has 128 features per
coordinate fixed (= embed_dims / 2 at 256); the tiny model calls it with embed_dims / 2, the
same function otherwise.
"""
import contextlib
import functools

import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions
from make_deformable_detr import SCALE, batch, run
from make_deformable_detr import model_cfg as deformable_cfg

from densevit.utils.random_init import randomize_

D, QUERIES, DN_QUERIES = 16, 8, 6  # D, classes (3) and detections (10) as Deformable's
SIZES = [(48, 64), (40, 56)]  # the padded batch (h, w), as make_deformable_detr.py's
OTHER = (44, 32)
GT = [  # per image of the padded batch: xyxy pixels of img_shape, labels
    (torch.tensor([[4.0, 6.0, 30.0, 40.0], [20.0, 2.0, 60.0, 22.0], [33.5, 25.0, 47.0, 44.0]]),
     torch.tensor([0, 2, 1])),
    (torch.tensor([[10.0, 8.0, 50.0, 36.0], [2.0, 20.0, 14.0, 38.5]]), torch.tensor([1, 1])),
]


def model_cfg():
    """make_deformable_detr.py's two-stage refined ResNet-50 model turned into mmdet's DINO
    as its zoo config does it: no dropout (the training step is compared), image encoding
    temperature 20 without offset, focal loss weight 1, the denoising generator."""
    cfg = deformable_cfg(refine=True, two_stage=True, depth=50)
    enc, dec = cfg['encoder']['layer_cfg'], cfg['decoder']['layer_cfg']
    for attn in (enc['self_attn_cfg'], dec['self_attn_cfg'], dec['cross_attn_cfg']):
        attn['dropout'] = 0.0
    for ffn in (enc['ffn_cfg'], dec['ffn_cfg']):
        ffn['ffn_drop'] = 0.0
    cfg['positional_encoding'].update(offset=0.0, temperature=20)
    cfg['bbox_head'].update(type='DINOHead')
    cfg['bbox_head']['loss_cls'].update(loss_weight=1.0)
    cfg.update(type='DINO', num_queries=QUERIES, dn_cfg=dict(
        label_noise_scale=0.5, box_noise_scale=1.0,
        group_cfg=dict(dynamic=True, num_groups=None, num_dn_queries=DN_QUERIES)))
    return cfg


def with_gt(samples):
    """The samples of the padded batch with :data:`GT` as their ground truth."""
    from mmengine.structures import InstanceData
    for s, (boxes, labels) in zip(samples, GT, strict=True):
        s.gt_instances = InstanceData(bboxes=boxes.clone(), labels=labels.clone())
    return samples


@contextlib.contextmanager
def dn_recorder(generator, record):
    """While open, ``record`` gets what mmdet's denoising generator ``generator`` drew and
    made: ``dn_label_query``, ``dn_bbox_query``, ``dn_attn_mask``, ``dn_groups``,
    ``dn_boxes`` (noised, before ``inverse_sigmoid``) and ``dn_labels``."""
    from mmdet.models.layers.transformer import dino_layers
    gen = type(generator)
    call, bbox_query = gen.__call__, gen.generate_dn_bbox_query

    def recorded_call(self, batch_data_samples):
        out = call(self, batch_data_samples)
        record.update(dn_label_query=out[0], dn_bbox_query=out[1], dn_attn_mask=out[2],
                      dn_groups=torch.tensor(out[3]['num_denoising_groups']))
        return out

    def recorded_bbox_query(self, gt_bboxes, num_groups):
        inverse = dino_layers.inverse_sigmoid

        def keep(x, eps):
            record['dn_boxes'] = x.clone()
            return inverse(x, eps=eps)
        dino_layers.inverse_sigmoid = keep
        try:
            return bbox_query(self, gt_bboxes, num_groups)
        finally:
            dino_layers.inverse_sigmoid = inverse

    hook = generator.label_embedding.register_forward_hook(
        lambda m, inp, out: record.__setitem__('dn_labels', inp[0].clone()))
    gen.__call__, gen.generate_dn_bbox_query = recorded_call, recorded_bbox_query
    try:
        yield record
    finally:
        gen.__call__, gen.generate_dn_bbox_query = call, bbox_query
        hook.remove()


def train_step(model, images, samples):
    """mmdet's losses on the padded batch with ground truth, recording the DN draws."""
    from mmdet.models.dense_heads import DINOHead
    record = {}
    loss_by_feat = DINOHead.loss_by_feat

    def recorded_loss(self, cls, boxes, enc_cls, enc_boxes, *args, **kwargs):
        record.update(train_logits=cls, train_boxes=boxes, enc_logits=enc_cls,
                      enc_boxes=enc_boxes)
        return loss_by_feat(self, cls, boxes, enc_cls, enc_boxes, *args, **kwargs)

    DINOHead.loss_by_feat = recorded_loss
    try:
        with dn_recorder(model.dn_query_generator, record):
            model.train()
            data = model.data_preprocessor(dict(inputs=images, data_samples=samples), True)
            torch.manual_seed(1234)
            losses = model.loss(data['inputs'], data['data_samples'])
            model.zero_grad()
            sum(losses.values()).backward()
            record['grads'] = {k: p.grad.clone() for k, p in model.named_parameters()
                               if p.grad is not None}
    finally:
        DINOHead.loss_by_feat = loss_by_feat
        model.eval()
    return dict(losses={k: v.detach() for k, v in losses.items()}, **record)


def main():
    import_openmmlab()
    from mmdet.models.layers.transformer import dino_layers
    dino_layers.coordinate_to_encoding = functools.partial(
        dino_layers.coordinate_to_encoding, num_feats=D // 2)
    name, seed = 'mmdet_dino', 0
    cfg = model_cfg()
    model = build('mmdet', cfg)
    norm = [t.clone() for t in model.data_preprocessor.buffers()]
    randomize_(model, seed=seed)
    for t, kept in zip(model.data_preprocessor.buffers(), norm, strict=True):
        t.copy_(kept)
    save_like_mmengine(model, name, cfg, 'mmdet', dict(classes=('a', 'b', 'c')))
    inputs, outputs = {}, {}
    for key, sizes in (('padded', SIZES), ('other', [OTHER])):
        images, samples = batch(sizes, seed=10 + seed)
        inputs[key] = dict(images=images, sizes=torch.tensor(sizes), scale=SCALE)
        outputs[key] = run(model, images, samples)
    images, samples = batch(SIZES, seed=10 + seed)
    samples = with_gt(samples)
    inputs['train'] = dict(images=images, sizes=torch.tensor(SIZES), scale=SCALE,
                           gt_bboxes=[b for b, _ in GT], gt_labels=[c for _, c in GT])
    outputs['train'] = train_step(model, images, samples)
    save_io(name, inputs, outputs,
            f'mmdet DINO ResNet-50 (base width 2), D={D}, {QUERIES} queries, '
            f'{DN_QUERIES} DN queries; eval mode, and one train-mode loss; {versions()}')


if __name__ == '__main__':
    main()
