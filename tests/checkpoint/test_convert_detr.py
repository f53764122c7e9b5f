"""DETR checkpoint conversion: HF DetrForObjectDetection outputs reproduced; official layout.

MMDetection's layout is proven against mmdet itself in test_openmmlab_detr.py."""
import pytest
import torch
from mmengine.registry import DefaultScope

from densevit.checkpoint.detr import convert_detr
from densevit.checkpoint.pretrained import load_pretrained
from densevit.registry import MODELS
from densevit.structures import DataSample

from hf_references import DETR_SIZES, official_detr_state_dict, outputs_of_both, tiny_hf_detr

D, HEADS, FFN, QUERIES, CLASSES, LAYERS = (DETR_SIZES[k] for k in (
    'd_model', 'heads', 'ffn', 'queries', 'classes', 'layers'))


@pytest.fixture(scope='module')
def hf_detr(tmp_path_factory):
    model = tiny_hf_detr()
    path = tmp_path_factory.mktemp('hf_detr')
    model.save_pretrained(path)  # the Hub file layout (backbone.conv_encoder, out_proj, fc1 ...)
    return model, path / 'model.safetensors'


def _ours():
    cfg = dict(
        type='DETR',
        backbone=dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                      out_indices=(3,), norm_cfg=dict(type='FrozenBN')),
        bbox_head=dict(type='DETRHead', num_classes=CLASSES, embed_dims=D, num_queries=QUERIES,
                       transformer=dict(num_heads=HEADS, num_encoder_layers=LAYERS,
                                        num_decoder_layers=LAYERS, feedforward_channels=FFN,
                                        dropout=0.)))
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg).eval()


def _batch():
    """Two images padded to 96x128; the second's content is 64x64, so 6 of the 3x4
    stride-32 feature cells are padding for it (masked in attention by both models)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 96, 128)
    pixel_mask = torch.ones(2, 96, 128, dtype=torch.long)
    pixel_mask[1, 64:], pixel_mask[1, :, 64:] = 0, 0
    x[1, :, 64:], x[1, :, :, 64:] = 0, 0
    samples = [DataSample(metainfo=dict(img_shape=(96, 128))),
               DataSample(metainfo=dict(img_shape=(64, 64)))]
    return x, pixel_mask, samples


@pytest.mark.parametrize('source', ['hub_file', 'module_state_dict'])
def test_hf_detr_outputs_match(hf_detr, source):
    hf, path = hf_detr
    x, pixel_mask, samples = _batch()
    ref, out = outputs_of_both(hf, path, source, _ours(), convert_detr, (x, pixel_mask, samples))
    # the queries differ from each other, so a mix-up of query rows would show
    assert ref.logits.std(dim=1).min() > 5e-3 and ref.pred_boxes.std(dim=1).min() > 5e-4
    torch.testing.assert_close(out['pred_logits'][-1], ref.logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(out['pred_boxes'][-1], ref.pred_boxes, atol=1e-4, rtol=0)
    if source == 'hub_file':  # the padding mask matters: the comparison covers it
        with torch.no_grad():
            unmasked = hf(pixel_values=x).logits
        assert (unmasked[1] - ref.logits[1]).abs().max() > 1e-3


def test_official_layout(hf_detr):
    hf, _ = hf_detr
    ours = _ours()
    ours.load_state_dict(convert_detr(hf.state_dict(), strict=True))
    official = official_detr_state_dict(ours)
    assert 'transformer.decoder.layers.0.multihead_attn.in_proj_weight' in official
    assert 'transformer.encoder.layers.0.linear1.weight' in official
    assert 'backbone.0.body.layer1.0.downsample.1.running_var' in official
    converted = convert_detr(official, strict=True)
    expected = ours.state_dict()
    assert set(converted) == set(expected)
    for k, v in expected.items():
        torch.testing.assert_close(converted[k], v, rtol=0, atol=0)


def test_whole_checkpoint_through_load_pretrained(hf_detr, tmp_path):
    """An official file ({'model': ...}) loads into the detector with nothing left over."""
    hf, _ = hf_detr
    src = _ours()
    src.load_state_dict(convert_detr(hf.state_dict()))
    torch.save({'model': official_detr_state_dict(src)}, tmp_path / 'detr.pth')
    dst = _ours()
    report = load_pretrained(dst, tmp_path / 'detr.pth', convert=convert_detr)
    assert not (report.missing or report.unexpected or report.mismatched)
    torch.testing.assert_close(dst.bbox_head.class_embed.weight, src.bbox_head.class_embed.weight)


def test_unknown_layout_is_an_error_listing_keys():
    sd = {'layers.0.blocks.0.attn.qkv.weight': torch.zeros(1), 'norm.weight': torch.zeros(1)}
    with pytest.raises(ValueError, match=r'match no known layout.*layers\.0\.blocks'):
        convert_detr(sd)
