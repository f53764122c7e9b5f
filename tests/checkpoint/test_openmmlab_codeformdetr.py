"""The authors' Co-Deformable-DETR (Sense-X/Co-DETR) loads into densevit and trains as it does.

Fixture (tools/dev/openmmlab_fixtures/make_codeformdetr.py): the authors' ``CoDeformDETRHead``
(``CoDeformableDetrTransformer``: two-stage, box refinement, mixed selection, look forward
twice, positive queries with ``with_coord_feat``; focal loss) transcribed onto MMDetection
3.3's ``projects/CO-DETR`` port (3.3 has no Co-Deformable-DETR), with one ``CoATSSHead``, on
a ResNet-50 at base width 2 and a ``ChannelMapper`` (4 levels), D = 32, 8 queries, 1 + 2
layers, every tensor random (exact in float16, saved so), under ``CoDETR``'s names; its eval
outputs on a padded batch of two sizes, and one training step as ``CoDETR`` runs it: the
losses, the positive queries' padding draws (``torch.randperm``), the gradients (in full
for the heads' own parts, as random projections for the backbone, neck and transformer
layers). densevit builds ``configs/co_detr/co_deformable_detr_r50_1x_coco.py`` made tiny and
loads the file through :func:`densevit.apis.init_model` (layout ``Co-DETR
Co-Deformable-DETR``, ``densevit/checkpoint/co_dino.py``).
"""
from pathlib import Path

import pytest
import torch
from test_openmmlab_codino import (
    TOL,
    _Permutations,
    check_eval,
    check_grads,
    check_losses,
    mmdet_has,
)
from test_openmmlab_deformable_detr import max_diff
from test_openmmlab_deformable_detr import tiny as deformable_tiny
from test_openmmlab_dino import train_losses

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.utils.random_init import random_projections

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / 'tests' / 'checkpoint' / 'fixtures'
CONFIG = ROOT / 'configs' / 'co_detr' / 'co_deformable_detr_r50_1x_coco.py'


def tiny():
    cfg = deformable_tiny(CONFIG, 50)
    cfg.merge_from_dict({
        'model.bbox_head.embed_dims': 32, 'model.bbox_head.num_queries': 8,
        'model.bbox_head.transformer.feedforward_channels': 64})
    cfg.model.bbox_head.aux_heads[0].update(feat_channels=32, norm_groups=8)
    return cfg


@pytest.fixture(scope='module')
def model():
    return init_model(tiny(), FIXTURES / 'mmdet_codeformdetr.pth')


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmdet_codeformdetr_io.pth', weights_only=True)


def test_codeformdetr_file_recognised():
    sd = torch.load(FIXTURES / 'mmdet_codeformdetr.pth', weights_only=True)['state_dict']
    out = convert_model(sd, strict=True)
    assert out.layout == 'Co-DETR Co-Deformable-DETR'
    for key in ('bbox_head.content_embed.weight', 'bbox_head.proposals.pos_fc.weight',
                'bbox_head.aux_pos_trans.0.weight', 'bbox_head.aux_feat_trans_norm.0.bias',
                'bbox_head.aux_head_embed.weight', 'bbox_head.aux_downsample.1.weight',
                'bbox_head.aux_heads.0.atss_cls.weight'):
        assert key in out, key


def test_codeformdetr_predicts_as_reference(model, io):
    """Eval: every decoder layer's logits and boxes, the detections."""
    check_eval(model, io)


def _densevit_names(names, others):
    """mmdet names -> {densevit name: mmdet name}, by the layout of a file of ``names`` and
    ``others`` (the layout's signature may be among those)."""
    marked = convert_model({**{k: torch.zeros(1) for k in others},
                            **{k: torch.tensor([i + 1.0]) for i, k in enumerate(names)}},
                           strict=True)
    return {k: names[int(v) - 1] for k, v in marked.items() if v.item() > 0}


def test_codeformdetr_training_step_matches_reference(model, io, monkeypatch):
    """With the reference's draws: the 18 losses (the matching queries' 6, the encoder's 3,
    the ATSS head's 3, the positive queries' 6) and every parameter's gradient of their
    sum (in full, or its random projections)."""
    inputs, ref = io['inputs']['padded'], io['outputs']['train']
    draws = _Permutations(ref['perms'])
    monkeypatch.setattr(model.bbox_head, 'draws', draws)
    losses, _, grads = train_losses(model, inputs)
    assert not draws.perms and draws.calls == ['aux_negatives']  # every draw used
    check_losses(losses, ref['losses'], 18)
    theirs = {k: g for k, g in convert_model(ref['grads'], strict=True).items() if mmdet_has(k)}
    projected = _densevit_names(list(ref['grad_projections']), ref['grads'])
    ours = {k: g for k, g in grads.items() if mmdet_has(k)}
    assert set(ours) == set(theirs) | set(projected)
    check_grads(ours, theirs)
    for k, name in projected.items():
        mine = random_projections(name, ours[k])
        assert max_diff(mine, ref['grad_projections'][name]) <= \
            TOL * ours[k].abs().sum().item() + 1e-6, k
    for k in ('bbox_head.aux_feat_trans.0.weight', 'bbox_head.aux_head_embed.weight',
              'bbox_head.content_embed.weight', 'bbox_head.aux_heads.0.atss_cls.weight'):
        assert k in theirs, k
