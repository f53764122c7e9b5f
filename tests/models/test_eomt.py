"""EoMT's parts on their own: the build-time checks, the position embeddings it takes, the
mask annealing schedule and its hook (checked by hand), the targets, the post-processing and
the predicted data samples. The equality with HF's model: test_eomt_vs_hf.py."""
import math
from types import SimpleNamespace

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData, PixelData

from densevit.engine.mask_annealing_hook import MaskAnnealingHook
from densevit.models.layers.mask_upscale import official_num_upscale_blocks
from densevit.models.losses.point_loss import point_sample, uncertain_points
from densevit.models.segmentors.mask_annealing import annealed_probability, staggered_steps
from densevit.models.segmentors.mask_postprocess import (
    instance_segmentation,
    panoptic_segmentation,
    semantic_scores,
)
from densevit.models.segmentors.mask_targets import mask_targets
from densevit.registry import MODELS
from densevit.structures import DataSample


def build(pos_embed=None, num_blocks=2, test_cfg=None, num_things_classes=2, **backbone):
    backbone = dict(dict(type='VisionTransformer',
                         arch=dict(embed_dims=32, num_layers=4, num_heads=2,
                                   feedforward_channels=64),
                         img_size=32, patch_size=8, num_register_tokens=1,
                         layer_scale_init_value=1.0), **backbone)
    if pos_embed is not None:
        backbone['pos_embed'] = pos_embed
    cfg = dict(type='EoMT', num_queries=4, num_blocks=num_blocks,
               num_things_classes=num_things_classes, backbone=backbone, test_cfg=test_cfg,
               decode_head=dict(type='EoMTHead', num_classes=3,
                                criterion=dict(type='MaskSetCriterion', num_points=16)))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg)


def samples(size=32, n=2):
    out = []
    for i in range(n):
        label = torch.full((size, size), i % 3, dtype=torch.long)
        label[4:20, 6:22] = (i + 1) % 3
        label[-2:] = 255
        out.append(DataSample(gt_sem_seg=PixelData(data=label[None]),
                              metainfo=dict(img_shape=(size, size), ori_shape=(size, size))))
    return out


# ---------------------------------------------------------------- build-time checks

def test_more_blocks_than_the_vit_has_is_refused_naming_both():
    with pytest.raises(ValueError, match=r'num_blocks=5 .* VisionTransformer has 4 layers'):
        build(num_blocks=5)
    with pytest.raises(ValueError, match=r'num_blocks=0'):
        build(num_blocks=0)
    assert build(num_blocks=4).num_blocks == 4  # queries from the first block on


@pytest.mark.parametrize('options,match', [
    (dict(pos_embed=dict(type='relative')), "'relative' is not supported"),
    (dict(window_size=2, global_attn_indexes=(3,), with_cls_token=False,
          num_register_tokens=0), 'windowed attention'),
    (dict(final_norm=False), 'final_norm=True'),
    (dict(test_cfg=dict(panoptic_on=True), num_things_classes=None),
     'panoptic_on needs num_things_classes'),
    (dict(test_cfg=dict(mode='slide', crop_size=(16, 16), stride=(8, 8), instance_on=True)),
     'slide inference gives semantic segmentation only'),
    (dict(test_cfg=dict(panoptic=True)), r"unknown test_cfg key\(s\) \['panoptic'\]"),
])
def test_unsupported_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        build(**options)


def test_upscale_blocks_follow_the_official_rule():
    assert [official_num_upscale_blocks(p) for p in (8, 14, 16, 32)] == [1, 1, 2, 3]
    model = build()
    assert len(model.decode_head.upscale) == 1  # 8x8 patches
    assert model.decode_head.in_channels == 32


# ---------------------------------------------------------------- position embeddings

@pytest.mark.parametrize('pos_embed', [
    None, dict(type='learned_2d'), dict(type='sincos_2d', placement='every_layer_shared'),
    dict(type='learned_1d', placement='every_layer'), dict(type='rope'), dict(type='none')])
def test_position_embeddings_train_and_predict(pos_embed):
    model = build(pos_embed)
    model.train()
    model.attn_mask_probs.fill_(0.5)
    x = torch.randn(2, 3, 32, 32)
    losses = model.loss(x, samples())
    assert set(losses) == {f'{t}loss_{n}' for t in ('', 'b0.', 'b1.')
                           for n in ('cls', 'mask', 'dice')}
    sum(losses.values()).backward()
    assert model.query_embed.weight.grad.abs().sum() > 0
    model.eval()
    out = model(x, mode='tensor')
    assert out['mask_logits'][-1].shape == (2, 4, 8, 8)  # the 4x4 grid upscaled once
    assert out['class_logits'][-1].shape == (2, 4, 4)


def test_queries_have_no_position():
    """An absolute table at every layer adds zero to the queries; RoPE leaves them unrotated."""
    from densevit.models.segmentors.eomt import with_query_rows
    model = build(dict(type='learned_1d', placement='every_layer'))
    vit = model.backbone
    with torch.no_grad():
        for table in vit.pos_embed.parameters():
            table.normal_()
    x = torch.zeros(1, 1 + 1 + 16, 32)
    position = with_query_rows(vit._layer_position(2, (4, 4), None, None, x), 'absolute', 4)
    # queries (4), class token (its learned row), register (zero), grid
    assert position.shape == (1, 4 + 2 + 16, 32) and position[:, 4].any()
    assert not position[:, :4].any() and not position[:, 5].any()
    model = build(dict(type='rope'))
    vit = model.backbone
    rotation = with_query_rows(vit.shared_position((4, 4), None, x), 'rotary', 4)
    assert rotation.cos.shape[-2] == 4 + 2 + 16
    assert (rotation.cos[..., :6, :] == 1).all() and (rotation.sin[..., :6, :] == 0).all()


def test_inference_has_no_masked_attention():
    """Eval: no intermediate predictions, the probabilities unread; ``masked_attention``
    follows them (1: masks, which change the output)."""
    model = build().eval()
    x = torch.randn(1, 3, 32, 32)
    model.attn_mask_probs.fill_(1.0)
    with torch.no_grad():
        plain = model(x, mode='tensor')
        model.attn_mask_probs.fill_(0.3)
        again = model(x, mode='tensor')
        model.test_cfg['masked_attention'] = True
        model.attn_mask_probs.fill_(1.0)
        masked = model(x, mode='tensor')
    assert len(plain['mask_logits']) == 1
    assert torch.equal(plain['mask_logits'][0], again['mask_logits'][0])
    assert len(masked['mask_logits']) == 3
    assert not torch.allclose(masked['mask_logits'][-1], plain['mask_logits'][0])


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    x = torch.randn(2, 3, 32, 32)
    results = []
    for with_cp in (False, True):
        model = build(with_cp=with_cp).train()
        model.attn_mask_probs.fill_(1.0)  # no draws
        torch.manual_seed(1)
        loss = sum(model.loss(x, samples()).values())
        loss.backward()
        results.append((loss.detach(), model.backbone.blocks[0].attn.qkv.weight.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


# ---------------------------------------------------------------- annealing

def test_poly_annealing_by_hand():
    """1 before start, (1 - progress) ** 0.9 in between, 0 from the end on."""
    assert annealed_probability(0, 100, 200) == 1.0
    assert annealed_probability(99, 100, 200) == 1.0
    assert annealed_probability(100, 100, 200) == 1.0
    assert annealed_probability(150, 100, 200) == pytest.approx(0.5 ** 0.9)  # 0.53589
    assert annealed_probability(150, 100, 200) == pytest.approx(0.535887, abs=1e-6)
    assert annealed_probability(175, 100, 200) == pytest.approx(math.exp(0.9 * math.log(0.25)))
    assert annealed_probability(199, 100, 200) == pytest.approx(0.01 ** 0.9)  # 0.01585
    assert annealed_probability(200, 100, 200) == 0.0
    assert annealed_probability(10 ** 6, 100, 200) == 0.0
    assert annealed_probability(150, 100, 200, power=1.0) == 0.5
    # the official stagger: four blocks, shares of T / 6
    assert staggered_steps(39120, 4) == ([6520, 13040, 19560, 26080],
                                         [13040, 19560, 26080, 32600])
    assert staggered_steps(100, 2) == ([25, 50], [50, 75])


class FakeRunner(SimpleNamespace):
    pass


def test_mask_annealing_hook_sets_each_block():
    model = build()
    logs = []
    runner = FakeRunner(model=model, max_iters=100, iter=0,
                        logger=SimpleNamespace(info=logs.append))
    hook = MaskAnnealingHook()
    hook.before_train(runner)
    assert '[25, 50] to [50, 75]' in logs[0]
    expected = {0: [1.0, 1.0], 25: [1.0, 1.0], 40: [0.4 ** 0.9, 1.0], 50: [0.0, 1.0],
                60: [0.0, 0.6 ** 0.9], 75: [0.0, 0.0], 99: [0.0, 0.0]}
    for it, probs in expected.items():
        runner.iter = it
        hook.before_train_iter(runner, it)
        assert model.attn_mask_probs.tolist() == pytest.approx(probs)
    hook = MaskAnnealingHook(start_iters=[0, 10], end_iters=[10, 20], power=1.0)
    hook.before_train(runner)
    runner.iter = 15
    hook.before_train_iter(runner, 15)
    assert model.attn_mask_probs.tolist() == [0.0, 0.5]
    with pytest.raises(ValueError, match=r'one entry per block .*num_blocks=2'):
        MaskAnnealingHook(start_iters=[0], end_iters=[10]).before_train(runner)
    with pytest.raises(ValueError, match='block 1 ends'):
        MaskAnnealingHook(start_iters=[0, 10], end_iters=[10, 10]).before_train(runner)
    with pytest.raises(ValueError, match='give both'):
        MaskAnnealingHook(start_iters=[0, 10])


# ---------------------------------------------------------------- targets and points

def test_targets_from_semantic_panoptic_and_instance_data():
    label = torch.tensor([[0, 0, 2], [255, 2, 2]])
    (t,) = mask_targets([DataSample(gt_sem_seg=PixelData(data=label[None]))], (2, 3), 'cpu', 3)
    assert t['labels'].tolist() == [0, 2]
    assert t['masks'].tolist() == [[[1, 1, 0], [0, 0, 0]], [[0, 0, 1], [0, 1, 1]]]
    # panoptic: label + instance * 1000, VOID = num_classes; padded with VOID
    ids = torch.tensor([[1000, 1000, 2], [2000, 3, 3]])
    (t,) = mask_targets([DataSample(gt_panoptic_seg=PixelData(data=ids[None]))], (2, 4), 'cpu', 3)
    assert t['labels'].tolist() == [2, 0, 0]
    assert t['masks'][:, :, 3].sum() == 0
    assert t['masks'][1].tolist() == [[1, 1, 0, 0], [0, 0, 0, 0]]
    # instances (things) and the stuff classes of the semantic map
    ds = DataSample(gt_sem_seg=PixelData(data=torch.tensor([[[0, 2, 2], [1, 2, 255]]])))
    ds.gt_instances = InstanceData(labels=torch.tensor([1]),
                                   masks=torch.tensor([[[0, 1, 0], [1, 0, 0]]]).bool())
    (t,) = mask_targets([ds], (2, 3), 'cpu', 3, num_things_classes=2)
    assert t['labels'].tolist() == [1, 2]
    (t,) = mask_targets([ds], (2, 3), 'cpu', 3)  # instance segmentation: the instances only
    assert t['labels'].tolist() == [1]


def test_importance_sampling_keeps_the_most_uncertain_candidates():
    logits = torch.tensor([[[[-4.0, 0.1], [3.0, -0.2]]]])  # [1, 1, 2, 2]
    centres = torch.tensor([[[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]])
    assert point_sample(logits, centres)[0, 0].tolist() == pytest.approx([-4.0, 0.1, 3.0, -0.2])

    def draws(name, shape, device=None, dtype=None):
        return centres if name == 'oversampled_points' else torch.full(shape, 0.5)
    points = uncertain_points(logits, num_points=3, oversample_ratio=4 / 3,
                              importance_sample_ratio=2 / 3, draws=draws)
    # |logit| smallest first: 0.1 at (0.75, 0.25), -0.2 at (0.75, 0.75); then one random point
    assert points[0].tolist() == [[0.75, 0.25], [0.75, 0.75], [0.5, 0.5]]


# ---------------------------------------------------------------- post-processing

def test_semantic_scores_weigh_masks_by_class_probabilities():
    masks = torch.tensor([[[10.0, -10.0]], [[-10.0, 10.0]]])  # [2, 1, 2]
    classes = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]]))
    scores = semantic_scores(masks, classes)
    s = torch.sigmoid(torch.tensor(10.0)).item()
    assert scores[:, 0, 0].tolist() == pytest.approx([0.7 * s + 0.1 * (1 - s),
                                                      0.2 * s + 0.6 * (1 - s)])
    assert scores.shape == (2, 1, 2)


def test_panoptic_by_hand():
    """Queries 0 and 1 predict thing class 0 (p .95, .85), query 2 stuff class 2 (p .9),
    query 3 no object. Query 1's mask (columns 1-2) loses column 1 to query 0: it keeps half
    its own area, under the 0.8 overlap threshold, so it is dropped (its pixels VOID) unless
    the threshold is lower; then it is the second instance."""
    probs = torch.tensor([[0.95, 0.01, 0.02, 0.02], [0.85, 0.05, 0.05, 0.05],
                          [0.02, 0.03, 0.9, 0.05], [0.05, 0.05, 0.05, 0.85]])
    masks = torch.full((4, 2, 4), -20.0)
    masks[0][:, :2] = 20.0
    masks[1][:, 1:3] = 20.0
    masks[2][:, 3:] = 20.0
    masks[3][:] = 20.0
    ids = panoptic_segmentation(masks, probs.log(), num_things_classes=2)
    assert ids.tolist() == [[1000, 1000, 3, 2]] * 2  # 3: VOID (num_classes)
    ids = panoptic_segmentation(masks, probs.log(), num_things_classes=2, overlap_threshold=0.4)
    assert ids.tolist() == [[1000, 1000, 2000, 2]] * 2
    # nothing confident: all VOID
    ids = panoptic_segmentation(masks, torch.zeros(4, 4), num_things_classes=2)
    assert (ids == 3).all()


def test_instance_by_hand():
    masks = torch.tensor([[[4.0, -4.0]], [[-4.0, 4.0]]])  # [2, 1, 2]
    classes = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]]))
    out = instance_segmentation(masks, classes, max_per_image=3)
    assert out['labels'].tolist() == [0, 1, 1]  # (q0, c0) .7, (q1, c1) .6, (q0, c1) .2
    mask_score = torch.sigmoid(torch.tensor(4.0)).item()
    assert out['scores'].tolist() == pytest.approx([0.7 * mask_score, 0.6 * mask_score,
                                                    0.2 * mask_score], rel=1e-5)
    assert out['bboxes'].tolist() == [[0, 0, 1, 1], [1, 0, 2, 1], [0, 0, 1, 1]]
    things = instance_segmentation(masks, classes, max_per_image=3, num_things_classes=1)
    assert things['labels'].tolist() == [0]


def test_predict_fills_the_data_samples_at_the_original_size():
    model = build(test_cfg=dict(panoptic_on=True, instance_on=True, max_per_image=5)).eval()
    ds = DataSample(metainfo=dict(img_shape=(24, 32), ori_shape=(48, 64)))
    with torch.no_grad():
        (out,) = model.predict(torch.randn(1, 3, 32, 32), [ds])
    assert out.pred_sem_seg.data.shape == (1, 48, 64)
    assert out.seg_logits.data.shape == (3, 48, 64)
    assert out.pred_panoptic_seg.sem_seg.shape == (1, 48, 64)
    inst = out.pred_instances  # the best 5 (query, class) pairs, then the things among them
    assert 0 < len(inst) <= 5 and inst.masks.shape[1:] == (48, 64)
    assert (inst.labels < 2).all() and inst.bboxes.shape == (len(inst), 4)
    slide = build(test_cfg=dict(mode='slide', crop_size=(16, 16), stride=(8, 8))).eval()
    with torch.no_grad():
        (out,) = slide.predict(torch.randn(1, 3, 32, 32))
    assert out.seg_logits.data.shape == (3, 32, 32)
