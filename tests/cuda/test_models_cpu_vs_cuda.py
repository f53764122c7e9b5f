"""Backbones, detectors and the segmentor: CPU and CUDA give the same outputs and gradients.

Each case copies one model (same weights) to both sides and feeds both the same
inputs. ``cpu-cuda`` compares CPU fp32 with CUDA fp32 (TF32 off, tests/cuda/conftest.py);
``cpu64-cpu32`` runs the same code on CPU float64 against float32, so the
comparison itself is checked on machines without a GPU.
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.structures import InstanceData, PixelData

from densevit.registry import MODELS
from densevit.structures import DataSample

from device_compare import assert_same, forward_backward, needs_cuda, sum_losses

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'
PAIRS = [pytest.param((('cpu', torch.float64), ('cpu', torch.float32)), id='cpu64-cpu32'),
         pytest.param((('cpu', torch.float32), ('cuda', torch.float32)), id='cpu-cuda',
                      marks=needs_cuda)]

BACKBONES = {
    'vit': (dict(type='VisionTransformer', img_size=32, patch_size=8, out_indices=(0, 1),
                 arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)),
            (32, 32)),
    'swin': (dict(type='SwinTransformer', arch=dict(embed_dims=16, depths=(2, 2),
                                                    num_heads=(1, 2)),
                  window_size=4, out_indices=(0, 1), drop_path_rate=0.), (32, 40)),
    'mit': (dict(type='MixVisionTransformer', arch=None, embed_dims=[8, 16, 24, 32],
                 num_layers=[1, 1, 1, 1], num_heads=[1, 1, 2, 2], drop_path_rate=0.),
            (48, 40)),
}


def build(cfg):
    init_default_scope('densevit')
    torch.manual_seed(0)
    return MODELS.build(cfg).train()


def compare(model, run, inputs, pair, loss_fn=None, what=''):
    (ref_dev, ref_dtype), (dev, dtype) = pair
    kw = dict(loss_fn=loss_fn) if loss_fn else {}
    ref = forward_backward(model, run, ref_dev, ref_dtype, inputs=inputs, **kw)
    got = forward_backward(model, run, dev, dtype, inputs=inputs, **kw)
    assert ref[1], 'no parameter received a gradient'
    assert_same(ref[0], got[0], what=f'{what} outputs')
    assert_same(ref[1], got[1], what=f'{what} gradients')


@pytest.mark.parametrize('pair', PAIRS)
@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_backbone(name, pair):
    cfg, (h, w) = BACKBONES[name]
    x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
    compare(build(cfg), lambda m, x: m(x), (x,), pair, what=name)


def _det_sample(img_shape, boxes, labels):
    ds = DataSample(metainfo=dict(img_shape=img_shape, ori_shape=img_shape,
                                  scale_factor=(1.0, 1.0)))
    ds.gt_instances = InstanceData(bboxes=torch.tensor(boxes, dtype=torch.float32),
                                   labels=torch.tensor(labels, dtype=torch.int64))
    return ds


def _tiny_detector(deformable):
    model = Config.fromfile(CONFIGS / 'tiny_detr_shapes.py').model.to_dict()
    if deformable:  # the deformable quickstart's head on the tiny ViT
        model.update(type='DeformableDETR', neck=dict(
            type='SimpleFeaturePyramid', in_channels=32, out_channels=32,
            scale_factors=(1.0, 0.5), in_stride=8))
        model['bbox_head'] = dict(
            type='DeformableDETRHead', num_classes=3, embed_dims=32, num_queries=6,
            num_feature_levels=3, with_box_refine=True, num_dets=10,
            transformer=dict(num_heads=2, num_points=2, num_encoder_layers=1,
                             num_decoder_layers=2, feedforward_channels=64, dropout=0.0),
            criterion=dict(type='SetCriterion', use_focal=True,
                           matcher=dict(type='HungarianMatcher', focal=True, cost_class=2.0),
                           loss_weights=dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0)))
    model = build(model)
    # At initialisation every sampling point lies exactly on a pixel centre (reference
    # points at centres, offsets of whole pixels), where bilinear sampling's gradient in
    # the location jumps: rounding picks a side and the offset gradients differ by O(1).
    # Moved off the centres, both sides must agree.
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('sampling_offsets.bias'):
                p.add_(torch.rand(p.shape, generator=g) * 0.6 - 0.3)
    return model


@pytest.mark.parametrize('pair', PAIRS)
@pytest.mark.parametrize('deformable', [False, True], ids=['detr', 'deformable_detr'])
def test_detector_losses_and_gradients(deformable, pair):
    model = _tiny_detector(deformable)
    g = torch.Generator().manual_seed(2)
    data = dict(inputs=[torch.randint(0, 256, (3, 48, 48), generator=g, dtype=torch.uint8),
                        torch.randint(0, 256, (3, 40, 48), generator=g, dtype=torch.uint8)],
                data_samples=[_det_sample((48, 48), [[4, 6, 30, 40], [20, 10, 44, 28]], [0, 2]),
                              _det_sample((40, 48), [[8, 8, 24, 36]], [1])])
    batch = model.data_preprocessor(data, training=True)  # on CPU, then moved to each side
    compare(model, lambda m, x, samples: m(x, samples, mode='loss'),
            (batch['inputs'], batch['data_samples']), pair, sum_losses,
            what='deformable_detr' if deformable else 'detr')


@pytest.mark.parametrize('pair', PAIRS)
def test_segformer_losses_and_gradients(pair):
    model = build(Config.fromfile(CONFIGS / 'tiny_segformer_shapes.py').model.to_dict())
    g = torch.Generator().manual_seed(3)
    samples = []
    for _ in range(2):
        seg = torch.randint(0, 4, (1, 48, 48), generator=g)
        seg[:, :4] = 255  # some ignored pixels
        ds = DataSample(metainfo=dict(img_shape=(48, 48), ori_shape=(48, 48)))
        ds.gt_sem_seg = PixelData(data=seg)
        samples.append(ds)
    data = dict(inputs=[torch.randint(0, 256, (3, 48, 48), generator=g, dtype=torch.uint8)
                        for _ in range(2)], data_samples=samples)
    batch = model.data_preprocessor(data, training=True)
    compare(model, lambda m, x, samples: m(x, samples, mode='loss'),
            (batch['inputs'], batch['data_samples']), pair, sum_losses, what='segformer')
