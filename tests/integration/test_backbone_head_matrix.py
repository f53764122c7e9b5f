"""Every documented backbone x head combination builds from config alone and trains a step.

The combinations are the "Backbone x head" table of docs/architecture.md. Tiny widths and 64x64
inputs keep each case to a fraction of a second; what is checked is that the
contracts fit (``out_channels`` / ``out_strides`` / ``in_index``) and that a loss
backpropagates to the backbone.
"""
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData, PixelData

from densevit.registry import MODELS
from densevit.structures import DataSample

VIT = dict(type='VisionTransformer', img_size=64, patch_size=8, with_cls_token=True,
           arch=dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64))
PE_VARIANTS = {
    'vit': {},
    'vit-pe-none': dict(pos_embed=dict(type='none')),
    'vit-pe-learned_2d-every_layer': dict(pos_embed=dict(type='learned_2d', placement='every_layer')),
    'vit-pe-sincos_2d-every_layer_shared': dict(
        pos_embed=dict(type='sincos_2d', placement='every_layer_shared')),
    'vit-pe-relative-every_layer': dict(pos_embed=dict(type='relative', placement='every_layer')),
}
PYRAMIDS = {
    'swin': dict(type='SwinTransformer', window_size=4, drop_path_rate=0.0,
                 arch=dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2))),
    'mit': dict(type='MixVisionTransformer', embed_dims=(16, 16, 32, 32), num_layers=(1, 1, 1, 1),
                num_heads=(1, 1, 2, 2), drop_path_rate=0.0),
    'resnet50': dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                     out_indices=(0, 1, 2, 3), norm_cfg=dict(type='BN')),
}
HYBRID = dict(type='VisionTransformer', img_size=64, patch_size=1, with_cls_token=False,
              stem=dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                        out_indices=(2,), norm_cfg=dict(type='BN')),
              arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64))
NUM_CLASSES = 3
DETR_HEAD = dict(type='DETRHead', num_classes=NUM_CLASSES, embed_dims=16, num_queries=4,
                 transformer=dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                                  feedforward_channels=32, dropout=0.0))
# Plain-DETR's head with every option on (two-stage, BoxRPB, one-to-many, denoising)
PLAIN_DETR_HEAD = dict(type='PlainDETRHead', num_classes=NUM_CLASSES, embed_dims=16,
                       num_queries=4, num_heads=2, num_decoder_layers=2, feedforward_channels=32,
                       norm_groups=4, box_rpb=dict(hidden_dims=8, stride=8),
                       one_to_many=dict(num_queries=8, k=2), dn_cfg=dict(num_dn_queries=4),
                       num_dets=4)


def _backbone(name):
    """(backbone config, whether it is a single-map plain ViT / hybrid)."""
    if name in PE_VARIANTS:
        return dict(VIT, **PE_VARIANTS[name]), True
    if name == 'hybrid':
        return dict(HYBRID), True
    return dict(PYRAMIDS[name]), False


def _channels(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg).out_channels


def _seg_head(kind, backbone, plain):
    """(backbone, neck, decode_head) for a segmentation head on this backbone."""
    neck = None
    if kind in ('naive', 'pup'):
        channels = _channels(backbone)[-1]
        head = dict(type='SETRUPHead', in_channels=channels, channels=16, in_index=-1,
                    num_classes=NUM_CLASSES, dropout_ratio=0, norm_cfg=dict(type='BN'),
                    num_convs=1 if kind == 'naive' else 2, up_scale=4 if kind == 'naive' else 2,
                    kernel_size=1 if kind == 'naive' else 3)
    elif kind == 'mla':
        if plain:  # four layers of one ViT, no class token (as SETR-MLA)
            backbone = dict(backbone, out_indices=(0, 1, 2, 3), with_cls_token=False)
        neck = dict(type='MLANeck', in_channels=_channels(backbone), out_channels=16,
                    norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU'))
        head = dict(type='SETRMLAHead', in_channels=(16,) * 4, in_index=(0, 1, 2, 3),
                    channels=32, mla_channels=8, num_classes=NUM_CLASSES, dropout_ratio=0,
                    norm_cfg=dict(type='BN'))
    else:  # segformer: a pyramid, from the simple feature pyramid on single-map backbones
        if plain:
            neck = dict(type='SimpleFeaturePyramid', in_channels=_channels(backbone)[-1],
                        out_channels=16, in_stride=8 if backbone.get('patch_size') == 8 else 16)
            in_channels = [16] * 4
        else:
            in_channels = _channels(backbone)
        head = dict(type='SegformerHead', in_channels=in_channels, in_index=[0, 1, 2, 3],
                    channels=16, num_classes=NUM_CLASSES, norm_cfg=dict(type='BN'))
    return backbone, neck, head


def _batch(task, B=2, size=64):
    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(B, 3, size, size, generator=g)
    samples = []
    for i in range(B):
        ds = DataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                      pad_shape=(size, size), batch_input_shape=(size, size)))
        if task == 'det':
            gt = InstanceData()
            gt.bboxes = torch.tensor([[4.0, 6.0, 30.0, 40.0], [20.0, 10.0, 60.0, 50.0]])[: i + 1]
            gt.labels = torch.tensor([0, 2])[: i + 1]
            ds.gt_instances = gt
        else:
            ds.gt_sem_seg = PixelData(
                data=torch.randint(0, NUM_CLASSES, (1, size, size), generator=g))
        samples.append(ds)
    return inputs, samples


BACKBONES = list(PE_VARIANTS) + list(PYRAMIDS) + ['hybrid']
COMBOS = [(b, h) for b in BACKBONES for h in ('detr', 'plain_detr')] + [
    (b, h) for b in BACKBONES for h in ('naive', 'pup', 'mla', 'segformer')
    if not (b == 'hybrid' and h == 'mla')]  # MLA reads four depths of one plain ViT


@pytest.mark.parametrize('backbone_name,head', COMBOS)
def test_combination_trains_a_step(backbone_name, head):
    torch.manual_seed(0)
    backbone, plain = _backbone(backbone_name)
    if head in ('detr', 'plain_detr'):
        cfg = dict(type='DETR', backbone=backbone,
                   bbox_head=DETR_HEAD if head == 'detr' else PLAIN_DETR_HEAD)
        if head == 'plain_detr' and not plain:  # its stride-8 map: 64 pixels for 12 proposals
            cfg['feat_index'] = 1
        task = 'det'
    else:
        backbone, neck, decode_head = _seg_head(head, backbone, plain)
        cfg = dict(type='EncoderDecoder', backbone=backbone, neck=neck, decode_head=decode_head,
                   test_cfg=dict(mode='whole'))
        task = 'seg'
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg)
    model.init_weights()
    model.train()
    inputs, samples = _batch(task)
    losses = model(inputs, samples, mode='loss')
    loss = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(loss), losses
    loss.backward()
    grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)
    model.eval()
    with torch.no_grad():
        out = model(inputs, _batch(task)[1], mode='predict')
    if task == 'det':
        assert out[0].pred_instances.bboxes.shape == (DETR_HEAD['num_queries'], 4)
    else:
        assert out[0].pred_sem_seg.data.shape == (1, 64, 64)
