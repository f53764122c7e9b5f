"""MMDetection 3.x DETR fixture: ``mmdet_detr_r50.pth`` (+ ``_io.pth``) for
``tests/checkpoint/test_openmmlab_detr.py``.

The model is mmdet's own ``configs/detr/detr_r50_8xb2-150e_coco.py`` (read from the
installed package), made tiny: ResNet-50 bottlenecks with one block per stage and
``base_channels=4`` (mmdet's ResNet has no block-count argument, so its depth-50
entry is pointed at ``(1, 1, 1, 1)`` while the model is built), transformer width
32 with 4 heads, FFN 64, 1 encoder and 2 decoder layers, 30 queries of which the
best ``max_per_img=20`` are kept (zoo: 100 and 100, so the top-k is a sort there; fewer
here so the selection is tested too). The 80 classes (+ no object), the ChannelMapper
input projection, the sine encoding and the test pipeline are the zoo config's. Every
parameter and buffer is drawn from a seed (``randomize_``; the query embedding and the
decoder's cross-attention projections from N(0, 1), so that the queries differ). Normalised inputs are stored as float16
(the model read them as float32 after the same rounding) to keep the files small.

The io file also records the zoo config's values a densevit config must mirror
(``inputs['zoo']``: classes, queries, ``max_per_img``, data preprocessor, test pipeline).

Reference outputs:

- ``padded``: two images of different sizes padded to one batch (normalised inputs
  and the metainfo mmdet's data preprocessor writes): the 4 ResNet stage maps, the
  class logits and boxes of every decoder layer, ``predict`` results;
- ``other_size``: one image of another size, no padding: logits, boxes, predictions;
- ``pipeline``: two raw BGR uint8 images through the zoo config's test pipeline
  (Resize to (1333, 800) keeping the ratio, PackDetInputs), data preprocessor and
  ``predict``, batched together (so padded as well).
"""
import copy
from pathlib import Path

import numpy as np
import torch
from common import build, import_openmmlab, save_io, save_like_mmengine, versions

from densevit.utils.random_init import randomize_

NAME = 'mmdet_detr_r50'
D, HEADS, FFN_DIMS, ENC, DEC, QUERIES, MAX_PER_IMG = 32, 4, 64, 1, 2, 30, 20


def tiny_config(mmdet):
    """(the zoo config, its model made tiny as a plain dict)."""
    from mmengine.config import Config
    path = Path(mmdet.__file__).parent / '.mim/configs/detr/detr_r50_8xb2-150e_coco.py'
    cfg = Config.fromfile(str(path))
    model = copy.deepcopy(cfg.model)
    model.backbone.update(base_channels=4, init_cfg=None)
    model.neck.update(in_channels=[128], out_channels=D)
    for coder, layers in ((model.encoder, ENC), (model.decoder, DEC)):
        coder.num_layers = layers
        layer = coder.layer_cfg
        for attn in ('self_attn_cfg', 'cross_attn_cfg'):
            if attn in layer:
                layer[attn].update(embed_dims=D, num_heads=HEADS)
        layer.ffn_cfg.update(embed_dims=D, feedforward_channels=FFN_DIMS)
    model.positional_encoding.num_feats = D // 2
    model.bbox_head.embed_dims = D
    model.num_queries = QUERIES
    model.test_cfg.max_per_img = MAX_PER_IMG
    return cfg, model.to_dict()


def metainfo(img_shape, batch_shape, ori_shape):
    h, w = img_shape
    return dict(img_shape=img_shape, batch_input_shape=batch_shape, pad_shape=batch_shape,
                ori_shape=ori_shape, scale_factor=(w / ori_shape[1], h / ori_shape[0]))


def samples(metas):
    from mmdet.structures import DetDataSample
    return [DetDataSample(metainfo=m) for m in metas]


def run(model, x, metas, with_stages=False):
    out = {}
    with torch.no_grad():
        if with_stages:
            saved = model.backbone.out_indices
            model.backbone.out_indices = (0, 1, 2, 3)
            out['stages'] = list(model.backbone(x))
            model.backbone.out_indices = saved
        logits, boxes = model._forward(x, samples(metas))
        out.update(logits=logits, boxes=boxes)
        out['pred'] = predictions(model.predict(x, samples(metas)))
    return out


def predictions(results):
    return [dict(bboxes=r.pred_instances.bboxes, scores=r.pred_instances.scores,
                 labels=r.pred_instances.labels) for r in results]


def through_pipeline(cfg, model, images):
    from mmcv.transforms import Compose
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import DefaultScope
    steps = [s for s in cfg.test_pipeline
             if s['type'] not in ('LoadImageFromFile', 'LoadAnnotations')]
    with DefaultScope.overwrite_default_scope('mmdet'):
        pipeline = Compose(copy.deepcopy(steps))
        data = [pipeline(dict(img=img, img_shape=img.shape[:2], ori_shape=img.shape[:2]))
                for img in images]
        with torch.no_grad():
            batch = model.data_preprocessor(pseudo_collate(data), False)
            results = model.predict(batch['inputs'], batch['data_samples'])
    return dict(batch_input_shape=list(batch['inputs'].shape[-2:]),
                img_shapes=[list(r.img_shape) for r in results], pred=predictions(results))


def main():
    _, mmdet = import_openmmlab()
    from mmdet.datasets import CocoDataset
    from mmdet.models.backbones.resnet import Bottleneck, ResNet
    cfg, model_cfg = tiny_config(mmdet)
    depth50 = ResNet.arch_settings[50]
    ResNet.arch_settings[50] = (Bottleneck, (1, 1, 1, 1))
    try:
        model = build('mmdet', copy.deepcopy(model_cfg))  # building edits the dict
    finally:
        ResNet.arch_settings[50] = depth50
    # randomize_ draws every float buffer, the data preprocessor's mean / std too: keep those
    preprocessor = copy.deepcopy(model.data_preprocessor)
    randomize_(model, seed=13)
    model.data_preprocessor = preprocessor
    # Queries start at zero and differ only by their position embedding and what they
    # attend to: at randomize_'s scale (0.2) cross-attention is near uniform and every
    # query predicts the same class. Drawn from N(0, 1) (nn.Embedding's own init), the
    # embedding and the cross-attention projections give several labels per image.
    g = torch.Generator().manual_seed(14)
    with torch.no_grad():
        for w in [model.query_embedding.weight] + \
                [layer.cross_attn.attn.in_proj_weight for layer in model.decoder.layers]:
            w.copy_(torch.randn(w.shape, generator=g))
    save_like_mmengine(model, NAME, model_cfg, 'mmdet',
                       dataset_meta=dict(classes=CocoDataset.METAINFO['classes']))

    g = torch.Generator().manual_seed(0)
    # padded batch: 96x128 and 64x80 (padding is 0 after normalisation, as mmdet pads)
    x = torch.randn(2, 3, 96, 128, generator=g).half().float()
    x[1, :, 64:], x[1, :, :, 80:] = 0, 0
    padded_metas = [metainfo((96, 128), (96, 128), (48, 64)),
                    metainfo((64, 80), (96, 128), (40, 50))]
    y = torch.randn(1, 3, 96, 64, generator=g).half().float()
    other_metas = [metainfo((96, 64), (96, 64), (60, 40))]
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (50, 70, 3), dtype=np.uint8),
              rng.integers(0, 256, (90, 40, 3), dtype=np.uint8)]

    zoo = dict(num_classes=cfg.model.bbox_head.num_classes, num_queries=cfg.model.num_queries,
               max_per_img=cfg.model.test_cfg.max_per_img,
               data_preprocessor=cfg.model.data_preprocessor.to_dict(),
               test_pipeline=[dict(s) for s in cfg.test_pipeline])
    inputs = dict(zoo=zoo, padded=dict(x=x.half(), metas=padded_metas),
                  other_size=dict(x=y.half(), metas=other_metas),
                  pipeline=dict(images=[torch.from_numpy(i) for i in images]))
    outputs = dict(padded=run(model, x, padded_metas, with_stages=True),
                   other_size=run(model, y, other_metas),
                   pipeline=through_pipeline(cfg, model, images))
    about = (f'mmdet DETR (detr_r50_8xb2-150e_coco.py made tiny: ResNet-50 blocks (1, 1, 1, 1), '
             f'base_channels 4, width {D}, {HEADS} heads, FFN {FFN_DIMS}, {ENC}+{DEC} '
             f'layers, {QUERIES} queries, max_per_img {MAX_PER_IMG}, 80 classes), '
             f'randomize_ seed 13, queries spread (seed 14); {versions()}')
    save_io(NAME, inputs, outputs, about)


if __name__ == '__main__':
    main()
