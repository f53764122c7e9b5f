"""MMDetection 3.x DINO checkpoints load into densevit and give mmdet's outputs.

Fixture (tools/dev/openmmlab_fixtures/make_dino.py): mmdet's own tiny ``DINO`` (ResNet-50 at
base width 2, 4 levels, embed_dims 16, 8 queries, 2 decoder layers), every tensor random,
saved as mmengine saves it, with mmdet's eval outputs on a padded batch of two sizes and on
one image of a third size, and one training step: its losses under a fixed seed with what
the contrastive denoising drew (noised labels and boxes), the DN queries and attention mask.
densevit builds the model from ``configs/dino/dino-4scale_r50_8xb2-12e_coco.py`` (widths
made tiny) and loads the file through :func:`densevit.apis.init_model`.
"""
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.structures import InstanceData
from test_openmmlab_deformable_detr import max_diff, run
from test_openmmlab_deformable_detr import tiny as deformable_tiny

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.models.heads.denoising import DenoisingQueries
from densevit.structures import DataSample

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / 'tests' / 'checkpoint' / 'fixtures'
CONFIG = ROOT / 'configs' / 'dino' / 'dino-4scale_r50_8xb2-12e_coco.py'
TOL = 1e-4


def tiny(config=CONFIG, embed_dims=16):
    """``config`` made as small as make_dino.py's model (FFN width 2 x ``embed_dims``)."""
    cfg = Config.fromfile(str(config))
    cfg.merge_from_dict({
        'model.backbone.base_channels': 2,
        'model.bbox_head.num_classes': 3, 'model.bbox_head.embed_dims': embed_dims,
        'model.bbox_head.num_queries': 8, 'model.bbox_head.norm_groups': 8,
        'model.bbox_head.num_dets': 10, 'model.bbox_head.dn_cfg.num_dn_queries': 6,
        'model.bbox_head.transformer': dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                            num_decoder_layers=2,
                                            feedforward_channels=2 * embed_dims)})
    return cfg


@pytest.fixture(scope='module')
def model():
    return init_model(tiny(), FIXTURES / 'mmdet_dino.pth')


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmdet_dino_io.pth', weights_only=True)


def test_mmdet_dino_matches_mmdet(model, io):
    for case in ('padded', 'other'):
        ref, ours = io['outputs'][case], run(model, io['inputs'][case])
        assert torch.equal(ours['batch_input_shape'], ref['batch_input_shape'])
        for key in ('backbone', 'neck', 'logits', 'boxes', 'det_scores', 'det_bboxes'):
            assert max_diff(ours[key], ref[key]) <= TOL, (case, key, max_diff(ours[key], ref[key]))
        for a, b in zip(ours['det_labels'], ref['det_labels'], strict=True):
            assert torch.equal(a, b), case


def test_mmdet_dino_file_recognised():
    sd = torch.load(FIXTURES / 'mmdet_dino.pth', weights_only=True)['state_dict']
    out = convert_model(sd, strict=True)
    assert out.layout == 'MMDetection DINO'
    assert 'bbox_head.query_pos_head.layers.1.weight' in out
    assert 'bbox_head.dn.label_embed.weight' in out
    assert 'bbox_head.proposals.pos_fc.weight' not in out


def mmdet_draws(monkeypatch, ref, sizes):
    """Make densevit's denoising draw what mmdet drew: ``ref['dn_labels']`` / ``ref['dn_boxes']``
    are in mmdet's flat order (2·G repetitions of every box of the batch, positives of group
    g at repetition 2g, negatives at 2g + 1); densevit asks per image, positives then
    negatives, each [G·n_i] group by group."""
    total, G = sum(sizes), int(ref['dn_groups'])
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    calls = {'boxes': 0, 'labels': 0}

    def pick(flat, kind):
        i, negative = divmod(calls[kind], 2)
        calls[kind] += 1
        rows = [r * total + starts[i] + j for g in range(G) for r in [2 * g + negative]
                for j in range(sizes[i])]
        return flat[rows]

    monkeypatch.setattr(DenoisingQueries, '_noise_boxes',
                        lambda self, boxes, lo, hi: pick(ref['dn_boxes'], 'boxes'))
    monkeypatch.setattr(DenoisingQueries, '_noise_labels',
                        lambda self, labels: pick(ref['dn_labels'], 'labels'))


def train_losses(model, inputs):
    h_w, s = inputs['sizes'].tolist(), inputs['scale']
    samples = []
    for (h, w), boxes, labels in zip(h_w, inputs['gt_bboxes'], inputs['gt_labels'], strict=True):
        sample = DataSample(metainfo=dict(img_shape=(h, w), ori_shape=(2 * h, 2 * w),
                                          scale_factor=(s, s)))
        sample.gt_instances = InstanceData(bboxes=boxes.clone(), labels=labels.clone())
        samples.append(sample)
    data = model.data_preprocessor(dict(inputs=list(inputs['images']), data_samples=samples),
                                   True)
    seen, dn = {}, model.bbox_head.dn  # the denoising queries, where the head has them
    hook = dn and dn.register_forward_hook(lambda m, a, out: seen.update(out))
    model.train()
    try:
        losses = model(data['inputs'], data['data_samples'], mode='loss')
        model.zero_grad()
        sum(losses.values()).backward()
    finally:
        model.eval()
        if hook:
            hook.remove()
    grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return {k: v.detach() for k, v in losses.items()}, seen, grads


def test_mmdet_dino_training_step_matches_mmdet(model, io, monkeypatch):
    """With mmdet's denoising draws: the same DN queries, attention mask, losses and
    gradients."""
    inputs, ref = io['inputs']['train'], io['outputs']['train']
    mmdet_draws(monkeypatch, ref, [len(b) for b in inputs['gt_bboxes']])
    losses, dn, grads = train_losses(model, inputs)
    assert dn['num_groups'] == int(ref['dn_groups'])
    assert torch.equal(dn['attn_mask'], ref['dn_attn_mask'])
    assert max_diff(dn['tgt'], ref['dn_label_query']) == 0
    ours_ref = model.bbox_head.dn_reference(dn['boxes'])
    assert max_diff(ours_ref, ref['dn_bbox_query'].sigmoid()) <= 1e-6
    assert set(losses) == set(ref['losses'])
    for k, v in ref['losses'].items():
        assert abs(float(losses[k]) - float(v)) <= 1e-5 * max(1.0, abs(float(v))), \
            (k, float(losses[k]), float(v))
    # every parameter's gradient of the losses' sum, under densevit's names; the input
    # projections' biases are densevit's own (mmdet's ChannelMapper convs have none)
    def mmdet_has(k):
        return re.fullmatch(r'bbox_head\.input_proj\.\d+\.0\.bias', k) is None
    theirs = {k: g for k, g in convert_model(ref['grads'], strict=True).items() if mmdet_has(k)}
    ours = {k: g for k, g in grads.items() if mmdet_has(k)}
    assert set(ours) == set(theirs)
    for k, g in ours.items():
        assert max_diff(g, theirs[k]) <= 1e-4 * theirs[k].abs().max().item() + 1e-6, k
    # look forward twice: layer 0's box predictor learns from layer 1's boxes too
    assert 'bbox_head.bbox_embed.0.layers.2.weight' in ours


def test_dino_file_into_deformable_detr_is_refused():
    """A DINO file does not load into two-stage Deformable DETR (no projected queries, DINO's
    extra modules): refused, naming what is missing and unexpected."""
    cfg = deformable_tiny('deformable_detr_refine-twostage_r50_16xb2-50e_coco.py', 50)
    with pytest.raises(CheckpointMismatchError, match=r'proposals\.pos_fc.*content_embed'):
        init_model(cfg, FIXTURES / 'mmdet_dino.pth')
