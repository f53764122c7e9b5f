"""MMDetection 3.x Deformable DETR fixtures: plain, box refinement, two-stage (+ refinement).

Each model is mmdet's own ``DeformableDETR`` (ResNet backbone,
``ChannelMapper`` neck with GroupNorm and an extra stride-2 level, ``DeformableDETRHead``)
at a tiny width, every tensor randomised. Saved: the checkpoint as mmengine saves it, and
mmdet's outputs on (a) a padded batch of two images of different sizes and (b) one image
of a third size: backbone maps, neck maps, per-layer logits / boxes, and the detections
of ``predict`` (rescaled to ``ori_shape`` through ``scale_factor``).

mmdet's ``get_proposal_pos_embed`` (two-stage) has 128 features per coordinate fixed
(= embed_dims / 2 at embed_dims 256, the only width mmdet's two-stage runs at); the tiny
two-stage model calls it with embed_dims / 2 instead, the same function otherwise.
"""
import functools

import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions

from densevit.utils.random_init import randomize_

D, CLASSES, QUERIES, DETS = 16, 3, 6, 10
SIZES = [(48, 64), (40, 56)]  # the padded batch (h, w)
OTHER = (44, 32)  # one more image, portrait
SCALE = 0.5  # the images stand for originals twice as large (scale_factor)
CHANNELS = {50: [16, 32, 64], 18: [4, 8, 16]}  # strides 8, 16, 32 at base_channels=2


def model_cfg(refine, two_stage, depth):
    attn = dict(embed_dims=D, num_heads=2, num_levels=4, num_points=2, batch_first=True)
    ffn = dict(embed_dims=D, feedforward_channels=2 * D, ffn_drop=0.1)
    return dict(
        type='DeformableDETR', num_queries=QUERIES, num_feature_levels=4,
        with_box_refine=refine, as_two_stage=two_stage,
        data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53],
                               std=[58.395, 57.12, 57.375], bgr_to_rgb=True,
                               pad_size_divisor=1),
        backbone=dict(type='ResNet', depth=depth, num_stages=4, base_channels=2,
                      out_indices=(1, 2, 3), frozen_stages=1,
                      norm_cfg=dict(type='BN', requires_grad=False), norm_eval=True,
                      style='pytorch'),
        neck=dict(type='ChannelMapper', in_channels=CHANNELS[depth], kernel_size=1,
                  out_channels=D, act_cfg=None, norm_cfg=dict(type='GN', num_groups=8),
                  num_outs=4),
        encoder=dict(num_layers=1, layer_cfg=dict(self_attn_cfg=attn, ffn_cfg=ffn)),
        decoder=dict(num_layers=2, return_intermediate=True,
                     layer_cfg=dict(self_attn_cfg=dict(embed_dims=D, num_heads=2, dropout=0.1,
                                                       batch_first=True),
                                    cross_attn_cfg=attn, ffn_cfg=ffn),
                     post_norm_cfg=None),
        positional_encoding=dict(num_feats=D // 2, normalize=True, offset=-0.5),
        bbox_head=dict(type='DeformableDETRHead', num_classes=CLASSES, embed_dims=D,
                       sync_cls_avg_factor=True,
                       loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0,
                                     alpha=0.25, loss_weight=2.0),
                       loss_bbox=dict(type='L1Loss', loss_weight=5.0),
                       loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
        train_cfg=dict(assigner=dict(type='HungarianAssigner', match_costs=[
            dict(type='FocalLossCost', weight=2.0),
            dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            dict(type='IoUCost', iou_mode='giou', weight=2.0)])),
        test_cfg=dict(max_per_img=DETS))


def batch(sizes, seed):
    """uint8 BGR images [3, h, w] and mmdet data samples standing for 2x larger originals."""
    from mmdet.structures import DetDataSample
    g = torch.Generator().manual_seed(seed)
    images = [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8) for h, w in sizes]
    samples = [DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(2 * h, 2 * w),
                                           scale_factor=(SCALE, SCALE)))
               for h, w in sizes]
    return images, samples


def run(model, images, samples):
    """mmdet's outputs: preprocessing, backbone, neck, head per layer, predictions."""
    data = model.data_preprocessor(dict(inputs=images, data_samples=samples), False)
    inputs, samples = data['inputs'], data['data_samples']
    with torch.no_grad():
        feats = model.backbone(inputs)
        necks = model.neck(feats)
        logits, boxes = model._forward(inputs, samples)
        preds = model.predict(inputs, samples)
    return dict(backbone=list(feats), neck=list(necks), logits=logits, boxes=boxes,
                det_bboxes=[p.pred_instances.bboxes for p in preds],
                det_scores=[p.pred_instances.scores for p in preds],
                det_labels=[p.pred_instances.labels for p in preds],
                batch_input_shape=torch.tensor(samples[0].batch_input_shape))


def main():
    import_openmmlab()
    from mmdet.models.detectors import DeformableDETR
    DeformableDETR.get_proposal_pos_embed = staticmethod(functools.partial(
        DeformableDETR.get_proposal_pos_embed, num_pos_feats=D // 2))
    # ResNet-50 (Bottleneck, as the zoo) in the plain model; ResNet-18 in the other two,
    # whose backbone mapping is the same and whose files would otherwise be twice as large
    for seed, (name, refine, two_stage, depth) in enumerate([
            ('mmdet_deformable_detr', False, False, 50),
            ('mmdet_deformable_detr_refine', True, False, 18),
            ('mmdet_deformable_detr_refine_twostage', True, True, 18)]):
        cfg = model_cfg(refine, two_stage, depth)
        model = build('mmdet', cfg)
        norm = [t.clone() for t in model.data_preprocessor.buffers()]  # mean, std
        randomize_(model, seed=seed)
        for t, kept in zip(model.data_preprocessor.buffers(), norm, strict=True):
            t.copy_(kept)  # the weights are random, the input normalisation is the config's
        if not refine:  # mmdet shares one predictor across layers; keep that true
            assert model.bbox_head.cls_branches[0] is model.bbox_head.cls_branches[1]
        meta = dict(classes=('a', 'b', 'c'))
        save_like_mmengine(model, name, cfg, 'mmdet', meta)
        inputs, outputs = {}, {}
        for key, sizes in (('padded', SIZES), ('other', [OTHER])):
            images, samples = batch(sizes, seed=10 + seed)
            inputs[key] = dict(images=images, sizes=torch.tensor(sizes), scale=SCALE)
            outputs[key] = run(model, images, samples)
        save_io(name, inputs, outputs,
                f'mmdet DeformableDETR ResNet-{depth} refine={refine} two_stage={two_stage}, D={D}, '
                f'eval mode; {versions()}')


if __name__ == '__main__':
    main()
