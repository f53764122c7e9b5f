"""Evaluation on images of different sizes: a batch of 8 predicts as batch 1 does.

A padded batch used to enter the computation (efficient attention over the whole padded
map, convolutions at the border, a ViT's attention over padded tokens), so scores depended
on the test batch size; evaluation now predicts each group of same-size images on its own
(``densevit/models/size_groups.py``). The reference is mmengine's own ``test_step`` on one
image at a time (no padding beyond ``size_divisor``), not the grouping code.

Data: generated shapes at 4 sizes in turn (``tests/tools/mixed_sizes.py``), 8 images.
"""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.apis import init_model
from densevit.models.tta.support import apply_tta
from densevit.registry import MODELS

from mixed_sizes import assert_same, batch1_and_batch8, evaluate, load_split, mixed, predict
from tiny_run import REPO


def test_segmentor_batch8_equals_batch1(seg, tmp_path_factory):
    """The tiny trained SegFormer (the segmentation quickstart, shrunk)."""
    config = mixed(tmp_path_factory, 'seg', seg['config'])
    model = init_model(config, seg['ckpt'])
    ref, got, cfg, dataset = batch1_and_batch8(model, config)
    assert_same(ref, got)
    m1, m8 = evaluate(cfg, dataset, ref), evaluate(cfg, dataset, got)
    assert abs(m1['mIoU'] - m8['mIoU']) <= 0.01, (m1, m8)


def tiny_deformable(tmp_path_factory):
    """configs/quickstart/deformable_detr_vit_shapes.py (ViT + SimpleFeaturePyramid +
    Deformable DETR with box refinement) at tiny widths, random weights."""
    path = tmp_path_factory.getbasetemp() / 'tiny_deformable_detr_vit.py'
    path.write_text(f"""
_base_ = [{str(REPO / 'configs/quickstart/deformable_detr_vit_shapes.py')!r}]
model = dict(
    backbone=dict(arch=dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64),
                  img_size=48),
    neck=dict(in_channels=32, out_channels=32),
    bbox_head=dict(embed_dims=32, num_queries=5, transformer=dict(
        num_heads=2, num_points=2, num_encoder_layers=1, num_decoder_layers=2,
        feedforward_channels=64)))
""")
    return str(path)


@pytest.mark.parametrize('detector', ['detr_vit', 'deformable_detr_vit_sfp'])
def test_detector_batch8_equals_batch1(det, tmp_path_factory, detector):
    """The tiny trained ViT + DETR, and the detection quickstart's architecture (ViT +
    simple feature pyramid + Deformable DETR) at tiny widths with random weights."""
    if detector == 'detr_vit':
        config, ckpt = mixed(tmp_path_factory, 'det', det['config']), det['ckpt']
    else:
        config, ckpt = mixed(tmp_path_factory, 'det', tiny_deformable(tmp_path_factory)), None
        torch.manual_seed(0)
    model = init_model(config, ckpt)
    ref, got, cfg, dataset = batch1_and_batch8(model, config)
    assert_same(ref, got)
    m1, m8 = evaluate(cfg, dataset, ref), evaluate(cfg, dataset, got)
    assert abs(m1['coco/bbox_mAP'] - m8['coco/bbox_mAP']) <= 0.001, (m1, m8)


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_tta_batch8_equals_batch1(request, tmp_path_factory, kind):
    """SegTTAModel / DetTTAModel run the model's test_step once per view: each view of a
    mixed batch (two scales, flipped and not) predicts as its image alone."""
    run = request.getfixturevalue(kind)  # the tiny trained segmentor / detector
    config = mixed(tmp_path_factory, kind, run['config'])
    cfg = apply_tta(Config.fromfile(config), ratios=[1.0, 1.25])
    cfg, dataset = load_split(cfg)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(dict(cfg.model, module=init_model(config, run['ckpt']))).eval()
    ref, got = predict(model.test_step, dataset, 1), predict(model.test_step, dataset, 8)
    assert ref[0].tta_views == 4
    assert_same(ref, got)
