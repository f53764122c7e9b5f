"""DETR's panoptic head (``DETRPanoptic`` + ``DETRMaskHead``) against Hugging Face's
``DetrForSegmentation`` (the reference) on the same weights: a tiny ResNet-50-layout DETR,
every saved tensor re-drawn, loaded through densevit's layout detection (the Hub file and the
transformers-5 module layout).

- eval, a padded batch of two sizes: class logits, boxes and mask logits within 1e-4;
- post-processing: ``test_cfg.rule='transformers'`` gives the segments (up to id relabelling)
  and classes of HF's ``post_process_panoptic_segmentation`` on the same outputs;
- training in float64: the same matching, and the class, box, mask (focal) and dice losses,
  and every shared parameter's gradient, equal HF's.
"""
import copy

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.checkpoint.detr_panoptic import convert_detr_panoptic
from densevit.checkpoint.model import load_model_weights
from densevit.checkpoint.read import read_checkpoint
from densevit.models.detectors.detr_panoptic_postprocess import query_classes
from densevit.models.segmentors.mask_postprocess import panoptic_from_scores
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.structures.panoptic import INSTANCE_OFFSET

from hf_detr_family import MatchRecorder, compare_grads, default_dtype, padded_batch
from hf_references import (
    DETR_SIZES,
    official_detr_state_dict,
    outputs_of_both,
    tiny_hf_detr_segmentation,
)

# 8 heads: the mask head's first convolutions have d_model + heads = 40 channels, 8 groups
HEADS = 8
D, FFN, QUERIES, CLASSES, LAYERS = (DETR_SIZES[k] for k in (
    'd_model', 'ffn', 'queries', 'classes', 'layers'))
THINGS = 2  # classes 0, 1 things, 2 stuff


def _spread_masks(model, pixel_values, seed=5):
    """What randomize_ leaves too alike across queries for a test of the masks: the query
    attention maps are near uniform (the decoder outputs share most of their value) and the
    decoder's input is dominated by the projected map and the backbone's finer maps, so every
    query's mask is nearly the same and a swap of queries would go unseen. The query
    projection is re-drawn larger and centred on the queries' mean output (for this batch),
    the key projection smaller, and the query-independent inputs scaled down."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        hs = model(pixel_values=pixel_values).last_hidden_state
        attn = model.bbox_attention
        attn.q_proj.weight.copy_(3 * torch.randn(attn.q_proj.weight.shape, generator=g))
        attn.q_proj.bias.copy_(-attn.q_proj.weight @ hs.mean((0, 1)))
        attn.k_proj.weight.copy_(0.3 * torch.randn(attn.k_proj.weight.shape, generator=g))
        model.mask_head.conv1.conv.weight[:, :D] *= 0.01  # the projected map's channels
        for stage in model.mask_head.fpn_stages:
            stage.fpn_adapter.weight *= 0.05
            stage.fpn_adapter.bias *= 0.05


@pytest.fixture(scope='module')
def hf_seg(tmp_path_factory):
    model = tiny_hf_detr_segmentation(heads=HEADS)
    _spread_masks(model, _batch()[0])
    path = tmp_path_factory.mktemp('hf_detr_seg')
    model.save_pretrained(path)  # the Hub layout: bbox_attention.q_linear, mask_head.lay1 ...
    return model, path / 'model.safetensors'


def _ours(**kwargs):
    cfg = dict(
        type='DETRPanoptic', num_things_classes=THINGS, fpn_indices=(2, 1, 0),
        backbone=dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                      out_indices=(0, 1, 2, 3), norm_cfg=dict(type='FrozenBN')),
        bbox_head=dict(type='DETRHead', num_classes=CLASSES, embed_dims=D, num_queries=QUERIES,
                       aux_loss=False,
                       transformer=dict(num_heads=HEADS, num_encoder_layers=LAYERS,
                                        num_decoder_layers=LAYERS, feedforward_channels=FFN,
                                        dropout=0.)),
        mask_head=dict(type='DETRMaskHead', num_heads=HEADS), **kwargs)
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg).eval()


def _panoptic_maps():
    """Image 0 (96x128): stuff class 2 around two things (classes 0 and 1) and a VOID band;
    image 1 (64x80): stuff 2, a thing of class 0 and a crowd region of class 1 (instance 0:
    not a target)."""
    a = torch.full((96, 128), 2, dtype=torch.int64)
    a[10:50, 20:70] = 0 + 1 * INSTANCE_OFFSET
    a[40:90, 80:120] = 1 + 2 * INSTANCE_OFFSET
    a[:, :6] = CLASSES  # VOID
    b = torch.full((64, 80), 2, dtype=torch.int64)
    b[20:44, 30:70] = 0 + 1 * INSTANCE_OFFSET
    b[50:60, 2:12] = 1  # crowd
    return a, b


def _batch(dtype=torch.float32):
    """:func:`padded_batch`'s two images (96x128 and 64x80, padded to 96x128) with the
    panoptic maps of :func:`_panoptic_maps` instead of boxes."""
    x, pixel_mask, _ = padded_batch(dtype)
    samples = [DataSample(metainfo=dict(img_shape=tuple(m.shape), ori_shape=tuple(m.shape)),
                          gt_panoptic_seg=PixelData(data=m[None])) for m in _panoptic_maps()]
    return x, pixel_mask, samples


def _hf_labels(model, samples):
    """HF's targets of the same segments: classes, boxes (normalised cxcywh, as densevit's
    head makes them: in float32) and masks."""
    segments = model.segment_samples(samples)
    return [dict(class_labels=t['labels'], boxes=t['boxes'].double(),
                 masks=s.gt_instances.masks.double())
            for t, s in zip(model.bbox_head.get_targets(segments), segments, strict=True)]


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_eval_outputs_match(hf_seg, source):
    ref, out = outputs_of_both(*hf_seg, source, _ours(), convert_detr_panoptic, _batch())
    # queries differ, so a mix-up of query rows would show (image 0 has no padding)
    assert ref.logits.std(dim=1).min() > 5e-3 and ref.pred_masks[0].std(dim=0).median() > 2e-3
    assert out['pred_masks'].shape == ref.pred_masks.shape == (2, QUERIES, 24, 32)
    diffs = {}
    for name, ours_t, ref_t in (('logits', out['pred_logits'][-1], ref.logits),
                                ('boxes', out['pred_boxes'][-1], ref.pred_boxes),
                                ('masks', out['pred_masks'], ref.pred_masks)):
        torch.testing.assert_close(ours_t, ref_t, atol=1e-4, rtol=0)
        diffs[name] = f'{(ours_t - ref_t).abs().max().item():.1e}'
    print(f'{source}: max differences {diffs}')


def test_hf_file_loads_through_layout_detection(hf_seg):
    """``tools/test.py`` / ``init_model``'s path: the file is recognised and loads whole."""
    _, path = hf_seg
    report = load_model_weights(_ours(), read_checkpoint(path), str(path), strict=True)
    assert report.complete and any(k.startswith('mask_head.decoder.fuse.2') for k in report.loaded)


def test_official_layout(hf_seg):
    """The official ``DETRsegm`` file: the DETR under ``detr.`` in the official repository's
    names, the mask head's as the Hub file has them (``bbox_attention.q_linear``,
    ``mask_head.lay1`` ...: the official names) -> the same tensors back."""
    hf, path = hf_seg
    ours = convert_detr_panoptic(read_checkpoint(path), strict=True)
    hub = read_checkpoint(path)
    official = {'detr.' + k: v for k, v in official_detr_state_dict(
        {k: v for k, v in ours.items() if not k.startswith('mask_head.')}).items()}
    official.update({k: v for k, v in hub.items()
                     if k.startswith(('mask_head.', 'bbox_attention.'))})
    assert 'detr.transformer.decoder.layers.0.multihead_attn.in_proj_weight' in official
    converted = convert_detr_panoptic(official, strict=True)
    assert converted.layout == 'official DETR panoptic' and set(converted) == set(ours)
    for k, v in ours.items():
        assert torch.equal(converted[k], v), k


def _segments(ids, void):
    """{frozenset of pixel indices: class} of a panoptic-like map (``void`` values left out)."""
    out = {}
    for v in ids.unique().tolist():
        if v in void:
            continue
        out[frozenset(torch.nonzero(ids.flatten() == v)[:, 0].tolist())] = v
    return out


@pytest.mark.parametrize('threshold', [0.3, 0.5])
def test_transformers_rule_matches_hf_post_processing(hf_seg, threshold):
    """The same segments (pixel sets) with the same classes as HF's
    ``post_process_panoptic_segmentation`` (stuff classes fused) on HF's outputs."""
    transformers = pytest.importorskip('transformers')
    hf, _ = hf_seg
    x, pixel_mask, _ = _batch()
    with torch.no_grad():
        ref = hf(pixel_values=x, pixel_mask=pixel_mask)
    # DetrImageProcessor without torchvision; the same compute_segments as the torch one
    processor = transformers.DetrImageProcessorPil()
    results = processor.post_process_panoptic_segmentation(
        ref, threshold=threshold, label_ids_to_fuse=set(range(THINGS, CLASSES)))
    found = 0
    for b, result in enumerate(results):
        scores, labels = query_classes(ref.logits[b], CLASSES)
        ids = panoptic_from_scores(ref.pred_masks[b], scores, labels, CLASSES, THINGS,
                                   threshold, 0.8, convention='transformers')
        classes = {s['id']: s['label_id'] for s in result['segments_info']}
        theirs = {pixels: classes[v] for pixels, v in
                  _segments(result['segmentation'].long(), {-1, 0}).items()}
        mine = {pixels: v % INSTANCE_OFFSET for pixels, v in _segments(ids, {CLASSES}).items()}
        assert mine == theirs
        found += len(mine)
    assert found >= 2  # the thresholds keep some queries of this random model


def _float64_position_encoding(head, hf):
    """Swap in HF's image position encoding, which follows the input's dtype (float64
    here); densevit's, like the paper's code, computes it in float32."""
    pe = hf.detr.model.position_embedding
    head.positional_encoding.forward = lambda mask: pe(
        shape=(mask.shape[0], 1, *mask.shape[1:]), device=mask.device, dtype=torch.float64,
        mask=~mask)


@pytest.mark.parametrize('encoding,loss_rtol,grad_rtol,grad_atol', [
    ('own', 1e-6, 1e-5, 1e-8), ('float64', 1e-12, 1e-10, 1e-14)])
def test_training_losses_and_gradients_match_in_float64(hf_seg, monkeypatch, encoding,
                                                        loss_rtol, grad_rtol, grad_atol):
    """Train mode, float64, every HF parameter trainable (HF freezes part of its backbone):
    the last layer's matching equals HF's; class, L1, GIoU, mask (focal) and dice losses
    and every parameter's gradient of their sum (HF's weights 1, 5, 2, 1, 1) equal HF's.
    densevit computes the image position encoding in float32 (DETR's code), HF in the
    input's dtype: with HF's swapped in, what remains is float64 rounding."""
    hf_model, path = hf_seg
    hf = copy.deepcopy(hf_model).double().train()
    for p in hf.parameters():
        p.requires_grad_(True)
    ours = _ours().double().train()
    ours.load_state_dict(convert_detr_panoptic(read_checkpoint(path), strict=True))
    head = ours.bbox_head
    if encoding == 'float64':
        _float64_position_encoding(head, hf)
    head.criterion.matcher = ours_matches = MatchRecorder(head.criterion.matcher)
    from transformers.loss import loss_for_object_detection as hf_loss
    hf_matches, match = [], hf_loss.HungarianMatcher.forward

    def recorded(self, outputs, targets):
        hf_matches.append([(i.tolist(), j.tolist()) for i, j in match(self, outputs, targets)])
        return match(self, outputs, targets)
    monkeypatch.setattr(hf_loss.HungarianMatcher, 'forward', recorded)

    x, pixel_mask, samples = _batch(torch.float64)
    with default_dtype(torch.float64):  # HF's criterion makes its class weights in it
        out = hf(pixel_values=x, pixel_mask=pixel_mask, labels=_hf_labels(ours, samples))
    losses = ours(x, samples, mode='loss')
    # the criterion's matching of the last layer, then the mask head's (the same)
    assert ours_matches.calls == hf_matches * 2
    assert [len(j) for _, j in hf_matches[0]] == [3, 2]  # VOID, the crowd region: no targets
    ref = out.loss_dict
    pairs = dict(loss_cls=ref['loss_ce'], loss_bbox=5 * ref['loss_bbox'],
                 loss_iou=2 * ref['loss_giou'], loss_mask=ref['loss_mask'],
                 loss_dice=ref['loss_dice'])
    assert set(losses) == set(pairs)
    relative = {k: ((losses[k] - v).abs() / v.abs()).item() for k, v in pairs.items()}
    worst = max(relative.values())
    assert worst <= loss_rtol, relative
    sum(losses.values()).backward()
    out.loss.backward()
    grad_rel, grad_abs = compare_grads(ours, hf, convert_detr_panoptic, grad_rtol,
                                       grad_atol)
    print(f'{encoding}: max relative loss diff {worst:.2e}, gradients: max relative diff '
          f'{grad_rel:.2e}, max absolute diff {grad_abs:.2e}')
