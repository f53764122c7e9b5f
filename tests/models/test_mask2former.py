"""Mask2Former's parts on their own: the build-time checks, the masked-attention mask (by
hand), the pixel decoder's maps, the loss keys, and the predicted data samples (the
post-processing EoMT shares: tests/models/test_eomt.py). The equality with HF's model:
test_mask2former_vs_hf.py; the recipe: tests/configs/test_mask2former_config.py."""
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.models.layers.masked_attention import masked_attention_mask
from densevit.registry import MODELS
from densevit.structures import DataSample

VIT = dict(type='VisionTransformer', arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                               feedforward_channels=64),
           img_size=32, patch_size=8, with_cls_token=False)


def build(scale_factors=(2.0, 1.0, 0.5, 0.25), num_levels=3, test_cfg=None, **parts):
    cfg = dict(type='Mask2Former', backbone=VIT, num_things_classes=2, test_cfg=test_cfg,
               neck=dict(type='SimpleFeaturePyramid', in_channels=32, out_channels=32,
                         scale_factors=scale_factors, in_stride=8),
               pixel_decoder=dict(type='MSDeformAttnPixelDecoder', feat_channels=32,
                                  out_channels=16, num_levels=num_levels, num_encoder_layers=1,
                                  num_heads=2, feedforward_channels=64),
               decode_head=dict(type='Mask2FormerHead', num_classes=3, num_queries=4,
                                embed_dims=32, num_layers=4, num_heads=2,
                                feedforward_channels=64,
                                criterion=dict(type='MaskSetCriterion', num_points=16)))
    for k, v in parts.items():
        cfg[k] = dict(cfg[k], **v) if k in ('pixel_decoder', 'decode_head') else v
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg)


def panoptic_samples(size=32, n=2, img_shape=None):
    out = []
    for i in range(n):
        ids = torch.full((size, size), 2, dtype=torch.long)  # stuff class 2
        ids[4:14, 6:20] = 1000 * (i + 1)  # thing class 0
        ids[18:, :10] = 1 + 1000  # thing class 1
        out.append(DataSample(gt_panoptic_seg=PixelData(data=ids[None]),
                              metainfo=dict(img_shape=img_shape or (size, size),
                                            ori_shape=(size, size))))
    return out


# ---------------------------------------------------------------- build-time checks

def test_more_levels_than_the_backbone_gives_is_refused_naming_both():
    with pytest.raises(ValueError, match=r'MSDeformAttnPixelDecoder asks for num_levels=3 maps, '
                                         r'but the SimpleFeaturePyramid gives 2'):
        build(scale_factors=(1.0, 0.5))
    with pytest.raises(ValueError, match=r'num_levels=5 maps, but the SimpleFeaturePyramid '
                                         r'gives 4'):
        build(num_levels=5)
    swin = dict(type='SwinTransformer', arch=dict(embed_dims=16, depths=[1, 1, 1, 1],
                                                  num_heads=[1, 1, 1, 1]),
                window_size=4, out_indices=(2, 3))
    with pytest.raises(ValueError, match=r'num_levels=3 maps, but the SwinTransformer gives 2 '
                                         r'\(out_channels=\[64, 128\]\)'):
        build(backbone=swin, neck=None)


def test_channels_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match=r'pixel_decoder.in_channels=\[8, 8, 8, 8\] but the '
                                         r'SimpleFeaturePyramid gives maps of \[32, 32, 32, 32\]'):
        build(pixel_decoder=dict(in_channels=[8, 8, 8, 8]))
    with pytest.raises(ValueError, match=r'decode_head.mask_channels=32 but the pixel decoder '
                                         r'gives 16'):
        build(decode_head=dict(mask_channels=32))
    with pytest.raises(ValueError, match=r"Mask2Former: unknown test_cfg key\(s\) \['masked_attention'\]"):
        build(test_cfg=dict(masked_attention=True))
    with pytest.raises(ValueError, match=r'Mask2Former: test_cfg.panoptic_on needs '
                                         r'num_things_classes'):
        build(num_things_classes=None, test_cfg=dict(panoptic_on=True))


# ---------------------------------------------------------------- the parts

def test_masked_attention_mask_by_hand():
    """Resized bilinearly to the level, masked where sigmoid < 0.5 (logit < 0), an empty
    query's row unmasked, one copy per head, batch-major."""
    logits = torch.full((2, 2, 4, 4), -3.0)
    logits[0, 0, :2, :2] = 3.0  # the top-left quarter
    logits[1, 1, :, 2:] = 3.0  # the right half; query (1, 0) and (0, 1) empty
    mask = masked_attention_mask(logits, (2, 2), num_heads=3)
    assert mask.shape == (6, 2, 4) and mask.dtype == torch.bool
    assert mask[0, 0].tolist() == [False, True, True, True]
    assert not mask[0, 1].any() and not mask[3, 0].any()  # empty masks attend everywhere
    assert mask[3, 1].tolist() == [True, False, True, False]
    assert torch.equal(mask[0], mask[2]) and torch.equal(mask[3], mask[5])


def test_maps_sets_and_loss_keys():
    model = build()
    x = torch.randn(2, 3, 64, 64)
    mask_features, memory = model.pixel_decoder(model.extract_feat(x))
    assert mask_features.shape == (2, 16, 16, 16)  # stride 4
    assert [m.shape[-2:] for m in memory] == [(2, 2), (4, 4), (8, 8)]  # coarsest first
    out = model(x, mode='tensor')
    assert len(out['mask_logits']) == len(out['class_logits']) == 5  # 4 layers + the first
    assert out['mask_logits'][-1].shape == (2, 4, 16, 16)
    assert out['class_logits'][-1].shape == (2, 4, 4)
    model.train()
    losses = model.loss(x, panoptic_samples(64))
    assert set(losses) == {f'{t}loss_{n}' for t in ('', 'd0.', 'd1.', 'd2.', 'd3.')
                           for n in ('cls', 'mask', 'dice')}
    sum(losses.values()).backward()
    assert model.decode_head.query_feat.weight.grad.abs().sum() > 0
    assert model.backbone.patch_embed.proj.weight.grad.abs().sum() > 0


def test_three_maps_need_no_fpn_step():
    """A backbone of three maps: the encoder reads them all, the mask features are its finest
    output's (stride 8)."""
    model = build(scale_factors=(1.0, 0.5, 0.25))
    assert len(model.pixel_decoder.lateral_convs) == 0
    out = model(torch.randn(1, 3, 64, 64), mode='tensor')
    assert out['mask_logits'][-1].shape == (1, 4, 8, 8)


def test_predict_gives_every_output_at_the_original_size():
    model = build(test_cfg=dict(panoptic_on=True, instance_on=True)).eval()
    x = torch.randn(2, 3, 32, 32)
    samples = panoptic_samples(img_shape=(24, 28))
    for ds in samples:
        ds.set_metainfo(dict(ori_shape=(48, 56)))
    with torch.no_grad():
        out = model(x, samples, mode='predict')
    for ds in out:
        assert ds.seg_logits.data.shape == (3, 48, 56)
        assert ds.pred_sem_seg.data.shape == (1, 48, 56)
        assert ds.pred_panoptic_seg.sem_seg.shape == (1, 48, 56)
        assert ds.pred_instances.masks.shape[1:] == (48, 56)
        assert (ds.pred_instances.labels < 2).all()  # things only
