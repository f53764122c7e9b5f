"""Hybrid ViT (ViT paper Sec. 3.1): ResNet feature map -> 1x1 patches -> encoder; under DETR."""
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

from densevit.registry import MODELS
from densevit.structures import DataSample

STEM = dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1), out_indices=(2,))
HYBRID = dict(type='VisionTransformer', img_size=64, patch_size=1, stem=STEM,
              arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32))


def _build(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg)
    model.init_weights()
    return model


def test_hybrid_shapes_strides_and_keys():
    model = _build(dict(HYBRID, pos_embed=dict(type='learned_2d', placement='every_layer')))
    assert model.out_strides == [16] and model.out_channels == [16]
    assert model.patch_embed.proj.in_channels == 128  # ResNet stage 3: 8 * 4 * 4
    assert model.pos_embed[0].num_patches_hw == (4, 4)  # 64 / 16
    keys = set(model.state_dict())
    assert {'stem.conv1.weight', 'stem.layer3.0.conv3.weight', 'patch_embed.proj.weight'} <= keys
    assert not any('layer4' in k for k in keys)  # stages after the one read are not built
    (out,) = model(torch.randn(2, 3, 96, 64))  # other size: tables resized
    assert out.shape == (2, 16, 6, 4)
    out.sum().backward()
    assert model.stem.layer2[0].conv1.weight.grad is not None


def test_frozen_stem_covers_the_cnn():
    model = _build(dict(HYBRID, frozen_stages=0)).train()
    assert not any(p.requires_grad for p in model.stem.parameters())
    assert all(not m.training for m in model.stem.modules())
    assert all(p.requires_grad for p in model.blocks.parameters())


def _sample(img_shape, boxes, labels):
    ds = DataSample(metainfo=dict(img_shape=img_shape, scale_factor=(1.0, 1.0),
                                  ori_shape=img_shape))
    gt = InstanceData()
    gt.bboxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    gt.labels = torch.tensor(labels, dtype=torch.int64)
    ds.gt_instances = gt
    return ds


def test_hybrid_under_detr():
    torch.manual_seed(0)
    model = _build(dict(
        type='DETR', backbone=dict(HYBRID, pos_embed='relative'),
        bbox_head=dict(type='DETRHead', num_classes=3, embed_dims=16, num_queries=4,
                       transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                        feedforward_channels=16, dropout=0.0)),
        data_preprocessor=dict(type='DetDataPreprocessor', mean=[0, 0, 0], std=[255, 255, 255],
                               pad_size_divisor=16)))
    data = dict(inputs=[torch.randint(0, 255, (3, 64, 48), dtype=torch.uint8),
                        torch.randint(0, 255, (3, 40, 64), dtype=torch.uint8)],
                data_samples=[_sample((64, 48), [[2, 3, 20, 30]], [1]),
                              _sample((40, 64), [[5, 5, 30, 30]], [2])])
    batch = model.data_preprocessor(data, training=True)
    losses = model(**batch, mode='loss')
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    assert model.backbone.stem.layer3[0].conv1.weight.grad is not None
    model.eval()
    with torch.no_grad():
        preds = model(**model.data_preprocessor(data), mode='predict')
    assert preds[0].pred_instances.bboxes.shape == (4, 4)
