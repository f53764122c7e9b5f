"""densevit's Deformable DETR equals HF transformers' with converted weights (tiny config):
plain, with box refinement, and two-stage (with refinement). Every HF tensor is random
(``randomize_``: BatchNorm statistics, biases, level embeddings, reference-point layer),
so a swapped or mis-split tensor shows in the outputs."""
import itertools

import pytest
import torch
from mmengine.registry import DefaultScope

from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.deformable_detr import convert_deformable_detr
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.random_init import randomize_

transformers = pytest.importorskip('transformers')
_SCOPES = itertools.count()  # a fresh default-scope name per model


def _hf(refine, two_stage=False):
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig
    rc = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                      layer_type='basic', out_features=['stage2', 'stage3', 'stage4'])
    cfg = DeformableDetrConfig(
        use_timm_backbone=False, backbone_config=rc, use_pretrained_backbone=False,
        backbone=None, d_model=32, encoder_layers=1, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, num_queries=6, num_labels=3, encoder_n_points=2,
        decoder_n_points=2, num_feature_levels=4, with_box_refine=refine,
        two_stage=two_stage, two_stage_num_proposals=6, disable_custom_kernels=True)
    torch.manual_seed(0)
    return randomize_(DeformableDetrForObjectDetection(cfg).eval(), seed=int(refine) + 2 * two_stage)


def _ours(refine, two_stage=False):
    DefaultScope.get_instance(f'test_convert_ddetr_{next(_SCOPES)}', scope_name='densevit')
    return MODELS.build(dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, stage_blocks=(1, 1, 1, 1), base_channels=8,
                      out_indices=(1, 2, 3)),
        bbox_head=dict(type='DeformableDETRHead', num_classes=3, embed_dims=32, num_queries=6,
                       num_feature_levels=4, with_box_refine=refine, as_two_stage=two_stage,
                       criterion=dict(type='SetCriterion', use_focal=True,
                                      matcher=dict(type='HungarianMatcher', focal=True)),
                       transformer=dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                        num_decoder_layers=2, feedforward_channels=32,
                                        dropout=0.0)))).eval()


@pytest.mark.parametrize('refine,two_stage', [(False, False), (True, False), (True, True)])
def test_matches_hf_deformable_detr(refine, two_stage):
    hf = _hf(refine, two_stage)
    ours = _ours(refine, two_stage)
    sd = convert_deformable_detr(hf.state_dict(), strict=True)
    # among every family's whole-model layouts (mmdet's and the official's too)
    assert convert_model(hf.state_dict(), strict=True).layout == 'Hugging Face Deformable DETR'
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    assert not unexpected and not [k for k in missing if 'num_batches_tracked' not in k]
    x = torch.randn(2, 3, 64, 80)
    pixel_mask = torch.ones(2, 64, 80, dtype=torch.long)
    pixel_mask[1, 48:], pixel_mask[1, :, 56:] = 0, 0  # image 1 is 48 x 56, padded
    samples = [DataSample(metainfo=dict(img_shape=s)) for s in ((64, 80), (48, 56))]
    with torch.no_grad():
        ref = hf(pixel_values=x, pixel_mask=pixel_mask)
        out = ours(x, samples, mode='tensor')
    assert (out['pred_logits'][-1] - ref.logits).abs().max() <= 1e-4
    assert (out['pred_boxes'][-1] - ref.pred_boxes).abs().max() <= 1e-4
    # the decoder's last hidden state (DeformableDetrModel's output) via the aux outputs
    for i, aux in enumerate(ref.auxiliary_outputs or []):
        assert (out['pred_logits'][i] - aux['logits']).abs().max() <= 1e-4
        assert (out['pred_boxes'][i] - aux['pred_boxes']).abs().max() <= 1e-4
    if two_stage:  # the encoder's per-pixel scores and boxes (finite where valid)
        enc = out['enc_outputs']
        assert (enc['pred_logits'] - ref.enc_outputs_class).abs().max() <= 1e-4
        assert torch.allclose(enc['pred_boxes'], ref.enc_outputs_coord_logits.sigmoid(),
                              atol=1e-4)


def test_two_stage_keys_and_unknown_keys_rejected():
    sd = _hf(True, two_stage=True).state_dict()
    out = convert_deformable_detr(sd, strict=True)
    assert {'bbox_head.proposals.memory_fc.weight', 'bbox_head.proposals.pos_norm.bias',
            'bbox_head.class_embed.2.bias', 'bbox_head.bbox_embed.2.layers.2.bias'} <= set(out)
    assert not any('query_embed' in k or 'reference_points' in k for k in out)
    with pytest.raises(ValueError, match='not understood'):
        convert_deformable_detr(dict(sd, **{'model.enc_output_extra.weight': torch.ones(1)}),
                                strict=True)
    with pytest.raises(ValueError, match='match no known layout'):
        convert_deformable_detr({'model.proposal_head.weight': torch.ones(1)}, strict=True)
