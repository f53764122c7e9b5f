"""Co-Deformable-DETR fixture: the authors' query head with the collaborative ATSS head.

MMDetection 3.3's ``projects/CO-DETR`` ports only Co-DINO; Co-Deformable-DETR's query head
(``CoDeformDETRHead`` with ``CoDeformableDetrTransformer``) is in the authors' repository
(Sense-X/Co-DETR, MMDetection 2.25). ``co_deformable_detr_head.py`` in the reference folder
(``$CODETR_REF/codetr/`` or the first argument, default ``/tmp/codetr_ref``; next to
``make_codino.py``'s ``co_atss_head.py``, ``co_dino_head.py``, ``transformer.py``) is that
code transcribed onto the 3.3 port: the authors' forward passes and auxiliary losses,
the matching losses by MMDetection 3.3's ``DeformableDETRHead.loss_by_feat``, each auxiliary
head's positional offset an ``nn.Embedding(num_co_heads, embed_dims)`` (see that file's
header). Without those files this script says so and writes nothing.

The model: ``make_codino.py``'s ResNet-50 (base width 2) and ``ChannelMapper`` (4 levels),
the authors' Co-Deformable-DETR query head as their config sets it (two-stage, box
refinement, mixed selection, look forward twice, ``with_coord_feat``, focal loss weight 2,
L1 5, GIoU 2) made tiny (1 encoder and 2 decoder layers, D = 32, 8 queries, one
auxiliary head's projections) and one ``CoATSSHead`` (``make_codetr.py``'s, on the
encoder's 4 levels and the head's ``downsample``), every tensor random and exact in float16,
saved in float16 (half the size; loaded into float32 the model is the one that ran) under
``CoDETR``'s names. Outputs as ``make_codino.py``'s: eval (every decoder layer's logits and
boxes, the detections) and one training step as ``CoDETR`` runs it (the matching and
encoder losses, the ATSS head's ``*0``, the positive queries' ``*_aux0`` with the
``torch.randperm`` draws, every parameter's gradient of the losses' sum: in full for the
heads' own parts, as two :func:`~densevit.utils.random_init.random_projections` for the
backbone, the neck and the transformer's layers, to keep the files small).
"""
import os
import re
import sys
from types import SimpleNamespace

import torch
from common import import_openmmlab, save_io, save_like_mmengine, versions
from make_codetr import import_codetr
from make_codino import (
    DETS,
    HUNGARIAN,
    QUERIES,
    D,
    random_model,
    record,
    train_step,
    transformer_cfgs,
)

from densevit.utils.random_init import random_projections

# gradients stored as random projections (the rest in full)
PROJECTED = r'(backbone|neck|query_head\.transformer\.(encoder|decoder))\..+'


def query_head_cfg():
    """The authors' ``CoDeformDETRHead`` as their config builds it, made tiny."""
    encoder, decoder_layer = transformer_cfgs()
    return dict(
        type='SXCoDeformDETRHead', num_query=QUERIES, num_classes=3, in_channels=2048,
        as_two_stage=True, sync_cls_avg_factor=True,
        transformer=dict(
            type='SXCoDeformableDetrTransformer', num_co_heads=1, num_feature_levels=4,
            encoder=encoder,
            decoder=dict(type='SXCoDeformableDetrTransformerDecoder', num_layers=2,
                         return_intermediate=True, look_forward_twice=True,
                         transformerlayers=decoder_layer)),
        positional_encoding=dict(type='SinePositionalEncoding', num_feats=D // 2,
                                 normalize=True, offset=-0.5),
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=2.0),
        loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0), train_cfg=HUNGARIAN,
        test_cfg=dict(max_per_img=DETS))


def small_train_step(model, images, samples):
    """``make_codino.py``'s training step, its gradients kept in full for the heads' own
    parts, as random projections for the rest (``PROJECTED``)."""
    out = train_step(model, images, samples)
    grads = out.pop('grads')
    full = {k: g for k, g in grads.items() if not re.fullmatch(PROJECTED, k)}
    out.update(grads=full, grad_projections={k: random_projections(k, g)
                                             for k, g in grads.items() if k not in full})
    return out


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('CODETR_REF', '/tmp/codetr_ref')
    import_openmmlab()
    names = ('co_atss_head', 'transformer', 'co_dino_head', 'co_deformable_detr_head')
    if any(import_codetr(folder, n) is None for n in names):
        print(f'make_codeformdetr.py: skipped, no {folder}/codetr/{{{",".join(names)}}}.py '
              f"(see this script's docstring)")
        return
    name, seed = 'mmdet_codeformdetr', 0
    model, cfg = random_model(query_head_cfg, seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half())  # exact in float16
    half = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_like_mmengine(SimpleNamespace(state_dict=lambda: half), name, cfg, 'mmdet',
                       dict(classes=('a', 'b', 'c')))
    inputs, outputs = record(model, seed, small_train_step)
    save_io(name, dict(padded=inputs), outputs,
            f"Co-Deformable-DETR (the authors' CoDeformDETRHead on MMDetection 3.3's "
            f'projects/CO-DETR port + CoATSSHead), ResNet-50 (base width 2), D={D}, '
            f'{QUERIES} queries; eval outputs and one training step; {versions()}')


if __name__ == '__main__':
    main()
