"""MMDetection's Co-DINO (``projects/CO-DETR``) loads into densevit and trains as it does.

Fixture (tools/dev/openmmlab_fixtures/make_codino.py): MMDetection 3.3's ``CoDINOHead``
(``CoDinoTransformer``, the quality focal loss) with one ``CoATSSHead``, on a ResNet-50 at
base width 2 and a ``ChannelMapper`` (4 levels), D = 32, 8 queries, 1 + 2 layers, every
tensor random, saved under ``CoDETR``'s names; its eval outputs on a padded batch of two
sizes, and one training step as ``CoDETR`` runs it without LSJ: the losses, the draws of
its contrastive denoising and of the positive queries' padding (``torch.randperm``), every
parameter's gradient. densevit builds ``configs/co_detr/co_dino-4scale_r50_8xb2-12e_coco.py``
made tiny and loads the file through :func:`densevit.apis.init_model` (the ``MMDetection
Co-DINO`` layout, ``densevit/checkpoint/co_dino.py``).
"""
import re
from pathlib import Path

import pytest
import torch
from test_openmmlab_deformable_detr import max_diff, run
from test_openmmlab_dino import mmdet_draws, train_losses
from test_openmmlab_dino import tiny as dino_tiny

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / 'tests' / 'checkpoint' / 'fixtures'
CONFIG = ROOT / 'configs' / 'co_detr' / 'co_dino-4scale_r50_8xb2-12e_coco.py'
TOL = 1e-4


def tiny():
    cfg = dino_tiny(CONFIG, embed_dims=32)  # GroupNorm(32) of the extra level: D >= 32
    cfg.model.bbox_head.aux_heads[0].update(feat_channels=32, norm_groups=8)
    return cfg


@pytest.fixture(scope='module')
def model():
    return init_model(tiny(), FIXTURES / 'mmdet_codino.pth')


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmdet_codino_io.pth', weights_only=True)


def test_mmdet_codino_file_recognised():
    sd = torch.load(FIXTURES / 'mmdet_codino.pth', weights_only=True)['state_dict']
    out = convert_model(sd, strict=True)
    assert out.layout == 'MMDetection Co-DINO'
    for key in ('bbox_head.aux_pos_trans.0.weight', 'bbox_head.aux_downsample.1.weight',
                'bbox_head.aux_heads.0.atss_cls.weight', 'bbox_head.query_pos_head.layers.1.weight',
                'bbox_head.transformer.decoder.1.cross_attn.sampling_offsets.weight'):
        assert key in out, key


def check_eval(model, io):
    """Every decoder layer's logits and boxes and the detections within TOL of the
    fixture's (labels equal)."""
    ref, ours = io['outputs']['eval'], run(model, io['inputs']['padded'])
    for key in ('logits', 'boxes', 'det_scores', 'det_bboxes'):
        assert max_diff(ours[key], ref[key]) <= TOL, (key, max_diff(ours[key], ref[key]))
    for a, b in zip(ours['det_labels'], ref['det_labels'], strict=True):
        assert torch.equal(a, b)


def test_mmdet_codino_predicts_as_mmdet(model, io):
    """Eval: every decoder layer's logits and boxes, the detections (DINO's inference)."""
    check_eval(model, io)


def mmdet_has(k):
    """Whether mmdet has densevit's parameter ``k``: its ChannelMapper convs have no bias."""
    return re.fullmatch(r'bbox_head\.input_proj\.\d+\.0\.bias', k) is None


# the extra level is 1 x 1 here and its GroupNorm has one channel per group (32 groups of
# D = 32): it normalises single values, so its output is its bias and the gradients of the
# convolution and of the norm's weight are rounding noise (zero in exact arithmetic), on
# both sides
NOISE = {'bbox_head.aux_downsample.0.weight', 'bbox_head.aux_downsample.0.bias',
         'bbox_head.aux_downsample.1.weight'}


def check_losses(losses, ref, count):
    """``count`` losses, the reference's keys, each within 1e-5 (relative above 1)."""
    assert set(losses) == set(ref) and len(losses) == count
    for k, v in ref.items():
        assert abs(float(losses[k]) - float(v)) <= 1e-5 * max(1.0, abs(float(v))), \
            (k, float(losses[k]), float(v))


def check_grads(ours, theirs):
    """Gradients by densevit name: the extra level's :data:`NOISE` small on both sides, the
    norm's bias they disturb within 1e-3 of its largest, every other within TOL."""
    for k in NOISE:
        assert ours[k].abs().max() < 1e-4 and theirs[k].abs().max() < 1e-4, k
    for k, g in theirs.items():
        rel = 1e-3 if k == 'bbox_head.aux_downsample.1.bias' else TOL
        assert k in NOISE or max_diff(ours[k], g) <= rel * g.abs().max().item() + 1e-6, k


class _Permutations:
    """densevit's positive-query draws giving mmdet's ``torch.randperm`` results, in order."""

    def __init__(self, perms):
        self.perms, self.calls = list(perms), []

    def __call__(self, name, shape, device=None, dtype=torch.float32):
        perm = self.perms.pop(0)
        assert shape == (len(perm),), (name, shape, len(perm))
        self.calls.append(name)
        u = torch.empty(shape, dtype=dtype)
        u[perm] = torch.arange(len(perm), dtype=dtype) / len(perm)  # ranks give perm back
        return u.to(device)


def test_mmdet_codino_training_step_matches_mmdet(model, io, monkeypatch):
    """With mmdet's draws: the 24 losses (DINO's 15 with the quality focal loss, the ATSS
    head's 3, the positive queries' 6) and every parameter's gradient of their sum."""
    inputs, ref = io['inputs']['padded'], io['outputs']['train']
    mmdet_draws(monkeypatch, ref, [len(b) for b in inputs['gt_bboxes']])
    draws = _Permutations(ref['perms'])
    monkeypatch.setattr(model.bbox_head, 'draws', draws)
    losses, _, grads = train_losses(model, inputs)
    assert not draws.perms and draws.calls == ['aux_negatives']  # every mmdet draw used
    check_losses(losses, ref['losses'], 24)
    theirs = {k: g for k, g in convert_model(ref['grads'], strict=True).items() if mmdet_has(k)}
    ours = {k: g for k, g in grads.items() if mmdet_has(k)}
    assert set(ours) == set(theirs)
    check_grads(ours, theirs)
    assert 'bbox_head.aux_pos_trans.0.weight' in ours and 'bbox_head.aux_heads.0.atss_cls.weight' \
        in ours
