"""DETR's panoptic head by hand: the panoptic rule (no-object and low scores dropped, arg-max
of the masks, stuff merged, tiny segments dropped), the segment targets, the mask head's shapes
and finer-map options, the frozen second stage, the refused options and checkpoints, and the
outputs of ``predict``. (Against Hugging Face: test_detr_panoptic_vs_hf.py.)"""
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.model import load_model_weights
from densevit.engine.preflight import missing_inputs
from densevit.models.detectors.detr_panoptic_postprocess import (
    detr_panoptic_segmentation,
    query_classes,
)
from densevit.models.losses.dense_mask_loss import upsampled_masks
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.structures.panoptic import INSTANCE_OFFSET

K, THINGS = 4, 2  # classes 0, 1 things; 2, 3 stuff


def build(**kwargs):
    cfg = dict(
        type='DETRPanoptic', num_things_classes=THINGS, fpn_indices=(2, 1, 0),
        backbone=dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                      out_indices=(0, 1, 2, 3), norm_cfg=dict(type='FrozenBN')),
        bbox_head=dict(type='DETRHead', num_classes=K, embed_dims=32, num_queries=6,
                       transformer=dict(num_heads=8, num_encoder_layers=1, num_decoder_layers=2,
                                        feedforward_channels=64, dropout=0.)),
        mask_head=dict(type='DETRMaskHead', num_heads=8))
    for k, v in kwargs.items():
        if v is None:
            cfg.pop(k, None)
        elif isinstance(v, dict) and isinstance(cfg.get(k), dict) and not v.get('_delete_'):
            cfg[k] = dict(cfg[k], **v)
        else:
            cfg[k] = {n: x for n, x in v.items() if n != '_delete_'} if isinstance(v, dict) else v
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg)


def sample(ids, **meta):
    shape = tuple(ids.shape)
    return DataSample(metainfo=dict(dict(img_shape=shape, ori_shape=shape), **meta),
                      gt_panoptic_seg=PixelData(data=ids[None]))


def panoptic_map():
    """40x48: stuff 2 above, stuff 3 below, a thing of class 0 and one of class 1, a crowd
    region of class 1 (instance 0) and a VOID column."""
    ids = torch.full((40, 48), 2, dtype=torch.int64)
    ids[20:] = 3
    ids[4:14, 4:20] = 0 + 1 * INSTANCE_OFFSET
    ids[22:36, 24:40] = 1 + 2 * INSTANCE_OFFSET
    ids[30:38, 2:8] = 1  # crowd
    ids[:, 46:] = K  # VOID
    return ids


# ---------------------------------------------------------------- the panoptic rule

def logits_for(owners, n, shape=(6, 6)):
    """Mask logits [n, H, W] where query ``owners[y][x]`` has logit 5 and the others 0."""
    masks = torch.zeros(n, *shape)
    for y, row in enumerate(owners):
        for x, q in enumerate(row):
            masks[q, y, x] = 5.0
    return masks


def test_rule_keeps_confident_objects_and_takes_the_argmax():
    owners = [[0] * 3 + [1] * 3] * 3 + [[2] * 3 + [3] * 3] * 3
    masks = logits_for(owners, 4)
    scores = torch.tensor([0.9, 0.95, 0.99, 0.5])
    labels = torch.tensor([0, 2, K, 1])  # query 2: no object; query 3: score too low
    ids = detr_panoptic_segmentation(masks, scores, labels, K, THINGS)
    # the dropped queries' pixels go to the best kept mask (here: logit 0 everywhere, query 0
    # first among ties), DETR has no mask threshold: every pixel is assigned
    assert set(ids[:3, :3].flatten().tolist()) == {0 + INSTANCE_OFFSET}
    assert set(ids[:3, 3:].flatten().tolist()) == {2}
    assert set(ids[3:].flatten().tolist()) == {0 + INSTANCE_OFFSET}
    nothing = detr_panoptic_segmentation(masks, scores, torch.full((4,), K), K, THINGS)
    assert (nothing == K).all()


def test_rule_merges_stuff_numbers_things_and_drops_tiny_segments():
    owners = [[0, 0, 1, 1, 2, 2]] * 6
    owners[0] = [3, 0, 1, 1, 2, 2]  # query 3 (a thing) wins one pixel only
    masks = logits_for(owners, 5)
    masks[4, :, 4:] = 4.0  # query 4 (class 2, stuff) second best on query 2's columns
    scores = torch.full((5,), 0.9)
    labels = torch.tensor([1, 3, 3, 0, 2])
    ids = detr_panoptic_segmentation(masks, scores, labels, K, THINGS)
    # queries 1 and 2 predict stuff class 3: one segment; query 3's single pixel (< 5) is
    # dropped and goes to query 0, the next best there; query 4 won nothing: no segment
    assert ids[:, :2].eq(1 + INSTANCE_OFFSET).all() and ids[:, 2:].eq(3).all()
    # things are numbered in query order of the kept ones
    labels = torch.tensor([1, 3, 3, 0, 0])
    masks[4] = 0
    masks[4, :, :1] = 9.0
    ids = detr_panoptic_segmentation(masks, scores, labels, K, THINGS)
    assert ids[:, 0].eq(0 + 2 * INSTANCE_OFFSET).all() and ids[:, 1].eq(1 + INSTANCE_OFFSET).all()
    # a larger min_area drops both things (6 pixels each): the stuff queries take all
    ids = detr_panoptic_segmentation(masks, scores, labels, K, THINGS, min_area=7)
    assert ids.eq(3).all()


def test_query_classes_softmax_sigmoid_and_refused():
    softmax = torch.tensor([[0.0, 3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 5.0]])
    scores, labels = query_classes(softmax, K)
    assert labels.tolist() == [1, K] and torch.allclose(scores, softmax.softmax(-1).max(-1)[0])
    scores, labels = query_classes(softmax[:, :K], K)
    assert labels.tolist() == [1, 0] and torch.allclose(scores, softmax[:, :K].sigmoid().max(-1)[0])
    with pytest.raises(ValueError, match='3 classes for a model of 4'):
        query_classes(softmax[:, :3], K)


# ---------------------------------------------------------------- targets, mask head

def test_segment_targets_leave_out_void_and_crowd():
    ids = panoptic_map()
    seg = build().segment_targets(sample(ids))
    assert seg.labels.tolist() == [2, 3, 0, 1]  # in id order: stuff 2, 3, things 1000, 2001
    assert seg.masks.shape == (4, 40, 48)
    assert seg.masks[2].sum() == 160 and seg.masks[3].sum() == 14 * 16
    assert seg.bboxes[2].tolist() == [4, 4, 20, 14]  # xyxy, one past the last pixel
    assert not seg.masks[:, :, 46:].any()  # VOID
    assert not seg.masks[:, 30:38, 2:8].any()  # the crowd region


def test_mask_head_outputs_stride_4_for_resnet_and_the_map_stride_without_fpn():
    model = build().eval()
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        out = model(x, mode='tensor')
    assert out['pred_masks'].shape == (1, 6, 16, 24)
    model = build(fpn_indices=(2,)).eval()  # one stage: the stride-16 map
    with torch.no_grad():
        assert model(x, mode='tensor')['pred_masks'].shape == (1, 6, 4, 6)
    model = build(fpn_indices=()).eval()
    with torch.no_grad():
        assert model(x, mode='tensor')['pred_masks'].shape == (1, 6, 2, 3)


def test_masks_of_selected_queries_equal_their_entries_of_every_querys_masks():
    """Training decodes the matched queries alone: each selected mask (any number per image,
    none for one image; three FPN stages, so each row takes its own image's finer maps) equals
    its entry of the full decode, and so do the gradients they send back."""
    torch.manual_seed(0)
    model = build().eval()
    head = model.mask_head
    B, Q, D, h, w = 3, 6, 32, 4, 6
    queries, memory, src = torch.randn(B, Q, D), torch.randn(B, D, h, w), torch.randn(B, D, h, w)
    mask = torch.zeros(B, h, w, dtype=torch.bool)
    mask[1, :, 4:] = True  # a padded image
    fpn = [torch.randn(B, c, h * 2 ** i, w * 2 ** i, requires_grad=True)
           for i, c in zip((1, 2, 3), model.backbone.out_channels[2::-1], strict=True)]
    image, query = torch.tensor([0, 0, 0, 2, 2]), torch.tensor([5, 1, 3, 0, 4])  # none of image 1
    full = head(queries, memory, src, mask, fpn)
    assert full.shape == (B, Q, 32, 48)
    picked = head(queries, memory, src, mask, fpn, selected=(image, query))
    torch.testing.assert_close(picked, full[image, query], rtol=0, atol=1e-5)
    grad_full = torch.autograd.grad(full[image, query].square().sum(), fpn[-1])[0]
    grad_picked = torch.autograd.grad(picked.square().sum(), fpn[-1])[0]
    torch.testing.assert_close(grad_picked, grad_full, rtol=1e-5, atol=1e-5)
    assert grad_full[1].abs().sum() == 0  # image 1 has no selected query


def test_vit_plain_detr_head_trains_masks_at_the_map_stride():
    model = build(
        backbone=dict(_delete_=True, type='VisionTransformer',
                      arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
                      img_size=48, patch_size=8, with_cls_token=False),
        fpn_indices=(),
        bbox_head=dict(_delete_=True, type='PlainDETRHead', num_classes=K, embed_dims=32,
                       num_queries=6, num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                       feedforward_channels=64, norm_groups=8, box_rpb=dict(hidden_dims=16),
                       one_to_many=dict(num_queries=6, k=2)))
    model.train()
    ids = panoptic_map()
    losses = model(torch.randn(1, 3, 40, 48), [sample(ids)], mode='loss')
    assert {'loss_mask', 'loss_dice', 'loss_cls', 'o2m_loss_cls', 'enc_loss_cls'} <= set(losses)
    sum(losses.values()).backward()
    assert model.mask_head.decoder.out_conv.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 40, 48), mode='tensor')['pred_masks'].shape == (1, 6, 5, 6)


def test_predictions_resized_to_the_original_padding_cut():
    torch.manual_seed(0)
    model = build(test_cfg=dict(object_threshold=0.0)).eval()
    with torch.no_grad():  # every query predicts a thing (class 0), none "no object"
        model.bbox_head.class_embed.bias[:] = torch.tensor([5.0, 0.0, 0.0, 0.0, -10.0])
    x = torch.randn(1, 3, 64, 96)
    ds = DataSample(metainfo=dict(img_shape=(60, 90), ori_shape=(30, 45)))
    with torch.no_grad():
        out = model(x, [ds], mode='tensor')
        (pred,) = model(x, [ds], mode='predict')
    seg = pred.pred_panoptic_seg.sem_seg
    assert seg.shape == (1, 30, 45) and (seg % INSTANCE_OFFSET < K).all()  # every pixel kept
    inst = pred.pred_instances
    assert len(inst) == 6 and (inst.labels < THINGS).all() and inst.masks.shape[1:] == (30, 45)
    # an instance's mask: its query's logits resized to the input, padding cut, then resized
    q = int(inst.queries[0])
    up = upsampled_masks(out['pred_masks'][0, q:q + 1], (64, 96), (60, 90))
    ref = torch.nn.functional.interpolate(up[None], size=(30, 45), mode='bilinear')[0, 0] > 0
    assert torch.equal(inst.masks[0], ref)
    with torch.no_grad():  # every query predicts stuff class 2: one segment, no instance
        model.bbox_head.class_embed.bias[:] = torch.tensor([0.0, 0.0, 5.0, 0.0, -10.0])
        (pred,) = model(x, [ds], mode='predict')
    assert pred.pred_panoptic_seg.sem_seg.eq(2).all() and len(pred.pred_instances) == 0


# ---------------------------------------------------------------- second stage, refusals

def test_frozen_detector_trains_the_mask_head_alone():
    model = build(freeze_detector=True).train()
    trainable = {k.split('.')[0] for k, p in model.named_parameters() if p.requires_grad}
    assert trainable == {'mask_head'}
    assert model.mask_head.training and not model.bbox_head.training  # no dropout there
    losses = model(torch.randn(1, 3, 40, 48), [sample(panoptic_map())], mode='loss')
    assert set(losses) == {'loss_mask', 'loss_dice'}
    sum(losses.values()).backward()
    assert all(p.grad is None for k, p in model.named_parameters() if 'mask_head' not in k)


def test_a_first_stage_of_another_architecture_is_refused_naming_both(tmp_path):
    first = build(mask_head=None, bbox_head=dict(num_queries=7))  # another query count
    with pytest.raises(CheckpointMismatchError) as e:
        load_model_weights(build(freeze_detector=True), {'state_dict': first.state_dict()},
                           'first.pth')
    message = str(e.value)
    assert 'first.pth cannot be the first stage' in message
    assert 'DETRPanoptic(ResNet, DETRHead, DETRMaskHead)' in message
    assert "bbox_head.query_embed.weight" in message
    # the first stage of the same detector loads; the mask head stays new
    first = build(mask_head=None)
    report = load_model_weights(build(freeze_detector=True), {'state_dict': first.state_dict()},
                                'first.pth', strict=False)
    assert report.missing and all(k.startswith('mask_head.') for k in report.missing)


def test_refused_options():
    with pytest.raises(ValueError, match='ConditionalDETRHead does not'):
        build(bbox_head=dict(type='ConditionalDETRHead'))
    with pytest.raises(ValueError, match='no mask_head'):
        build(mask_head=None, freeze_detector=True)
    with pytest.raises(ValueError, match=r"unknown keys \['threshold'\]"):
        build(test_cfg=dict(threshold=0.5))
    with pytest.raises(ValueError, match='rule must be one of'):
        build(test_cfg=dict(rule='maskformer'))
    with pytest.raises(ValueError, match='do not split into 8 GroupNorm groups'):
        build(mask_head=dict(num_heads=2))  # 32 + 2 channels


def test_preflight_refuses_a_second_stage_without_checkpoint():
    cfg = dict(model=dict(type='DETRPanoptic', freeze_detector=True), load_from=None)
    (problem,) = missing_inputs(cfg)
    assert 'model.freeze_detector=True' in problem and 'load_from' in problem
    assert missing_inputs(cfg, resume=True) == []  # resuming the second stage's own run
    assert missing_inputs(cfg, pretrained=False) == []  # tools/test.py gives a checkpoint
