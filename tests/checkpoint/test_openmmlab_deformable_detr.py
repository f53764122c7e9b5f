"""MMDetection 3.x Deformable DETR checkpoints load into densevit and give mmdet's outputs.

Fixtures (tools/dev/openmmlab_fixtures/make_deformable_detr.py): mmdet's own tiny
``DeformableDETR`` (plain, box refinement, two-stage with refinement), every tensor random,
saved as mmengine saves it, with mmdet's outputs on a padded batch of two images of
different sizes and on one image of a third size. densevit builds the model from the zoo
config in ``configs/deformable_detr/`` (widths made tiny) and loads the file through
:func:`densevit.apis.init_model`, the path ``tools/test.py`` takes.

The official fundamentalvision layout is checked key by key against the module names of
its source (its model needs compiled ops): :func:`test_official_layout_names`.
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.deformable_detr import convert_deformable_detr
from densevit.structures import DataSample

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / 'tests' / 'checkpoint' / 'fixtures'
CONFIGS = ROOT / 'configs' / 'deformable_detr'
TOL = 1e-4
CASES = [  # fixture, zoo config, ResNet depth
    ('mmdet_deformable_detr', 'deformable_detr_r50_16xb2-50e_coco.py', 50),
    ('mmdet_deformable_detr_refine', 'deformable_detr_refine_r50_16xb2-50e_coco.py', 18),
    ('mmdet_deformable_detr_refine_twostage',
     'deformable_detr_refine-twostage_r50_16xb2-50e_coco.py', 18),
]


def tiny(config, depth):
    """The zoo config with the fixture's widths (everything else as the config says)."""
    cfg = Config.fromfile(str(CONFIGS / config))
    cfg.merge_from_dict({
        'model.backbone.depth': depth, 'model.backbone.base_channels': 2,
        'model.bbox_head.num_classes': 3, 'model.bbox_head.embed_dims': 16,
        'model.bbox_head.num_queries': 6, 'model.bbox_head.norm_groups': 8,
        'model.bbox_head.num_dets': 10,
        'model.bbox_head.transformer': dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                            num_decoder_layers=2, feedforward_channels=32)})
    return cfg


def run(model, inputs):
    """densevit's outputs on the fixture's images, through its own data preprocessor."""
    h_w = inputs['sizes'].tolist()
    s = inputs['scale']
    samples = [DataSample(metainfo=dict(img_shape=(h, w), ori_shape=(2 * h, 2 * w),
                                        scale_factor=(s, s))) for h, w in h_w]
    data = model.data_preprocessor(dict(inputs=list(inputs['images']), data_samples=samples))
    x, samples = data['inputs'], data['data_samples']
    with torch.no_grad():
        feats = model.extract_feat(x)
        srcs, _, _ = model.bbox_head.project_levels(feats, model.padding_mask(x, feats, samples))
        out = model(x, samples, mode='tensor')
        preds = model(x, samples, mode='predict')
    return dict(backbone=list(model.backbone(x)), neck=srcs, logits=out['pred_logits'],
                boxes=out['pred_boxes'], batch_input_shape=torch.tensor(x.shape[-2:]),
                det_bboxes=[p.pred_instances.bboxes for p in preds],
                det_scores=[p.pred_instances.scores for p in preds],
                det_labels=[p.pred_instances.labels for p in preds])


def max_diff(a, b):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return max(max_diff(x, y) for x, y in zip(a, b, strict=True))
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()


@pytest.mark.parametrize('name,config,depth', CASES)
def test_mmdet_deformable_detr_matches_mmdet(name, config, depth):
    model = init_model(tiny(config, depth), FIXTURES / f'{name}.pth')
    io = torch.load(FIXTURES / f'{name}_io.pth', weights_only=True)
    for case in ('padded', 'other'):
        ref, ours = io['outputs'][case], run(model, io['inputs'][case])
        assert torch.equal(ours['batch_input_shape'], ref['batch_input_shape'])
        for key in ('backbone', 'neck', 'logits', 'boxes', 'det_scores', 'det_bboxes'):
            assert max_diff(ours[key], ref[key]) <= TOL, (case, key)
        for a, b in zip(ours['det_labels'], ref['det_labels'], strict=True):
            assert torch.equal(a, b), case


@pytest.mark.parametrize('name,refine,two_stage', [
    ('mmdet_deformable_detr', False, False), ('mmdet_deformable_detr_refine', True, False),
    ('mmdet_deformable_detr_refine_twostage', True, True)])
def test_mmdet_file_recognised_as_mmdet(name, refine, two_stage):
    """Among every family's whole-model layouts (DETR's and HF's too), strictly."""
    sd = torch.load(FIXTURES / f'{name}.pth', weights_only=True)['state_dict']
    out = convert_model(sd, strict=True)
    assert out.layout == 'MMDetection Deformable DETR'
    assert ('bbox_head.class_embed.1.weight' in out) == refine
    assert ('bbox_head.proposals.pos_fc.weight' in out) == two_stage
    # the ChannelMapper convs have no bias: zeros (the same function)
    assert not out['bbox_head.input_proj.3.0.bias'].any()
    assert convert_deformable_detr(sd, strict=True).layout == 'MMDetection Deformable DETR'


def test_mmdet_file_with_unknown_keys_is_refused():
    sd = torch.load(FIXTURES / 'mmdet_deformable_detr.pth', weights_only=True)['state_dict']
    sd['dn_query_generator.label_embedding.weight'] = torch.zeros(3, 16)
    with pytest.raises(ValueError, match='MMDetection Deformable DETR.*not understood'):
        convert_model(sd, strict=True)


# The official model's parameter names, as its modules define them
# (fundamentalvision/Deformable-DETR: models/deformable_detr.py, deformable_transformer.py,
# backbone.py), for 1 encoder / 2 decoder layers, refinement + two-stage.
def _official_keys(refine, two_stage):
    keys = ['backbone.0.body.conv1.weight', 'backbone.0.body.bn1.running_var',
            'backbone.0.body.layer4.0.downsample.1.weight', 'transformer.level_embed']
    for n in range(4):
        keys += [f'input_proj.{n}.0.weight', f'input_proj.{n}.0.bias',
                 f'input_proj.{n}.1.weight', f'input_proj.{n}.1.bias']
    msda = ('sampling_offsets', 'attention_weights', 'value_proj', 'output_proj')
    keys += [f'transformer.encoder.layers.0.{p}.{leaf}' for leaf in ('weight', 'bias')
             for p in [f'self_attn.{m}' for m in msda] + ['linear1', 'linear2', 'norm1',
                                                           'norm2']]
    for i in range(2):
        d = f'transformer.decoder.layers.{i}.'
        keys += [d + 'self_attn.in_proj_weight', d + 'self_attn.in_proj_bias',
                 d + 'self_attn.out_proj.weight', d + 'self_attn.out_proj.bias']
        keys += [f'{d}{p}.{leaf}' for leaf in ('weight', 'bias') for p in
                 [f'cross_attn.{m}' for m in msda] + ['linear1', 'linear2', 'norm1', 'norm2',
                                                      'norm3']]
    if two_stage:
        keys += [f'transformer.{m}.{leaf}' for leaf in ('weight', 'bias')
                 for m in ('enc_output', 'enc_output_norm', 'pos_trans', 'pos_trans_norm')]
    else:
        keys += ['query_embed.weight', 'transformer.reference_points.weight',
                 'transformer.reference_points.bias']
    heads = [('', 'class_embed'), ('', 'bbox_embed')]
    heads += [('transformer.decoder.', 'bbox_embed')] if refine else []  # second references
    heads += [('transformer.decoder.', 'class_embed')] if two_stage else []
    for prefix, head in heads:
        for n in range(2 + int(two_stage)):
            keys += ([f'{prefix}class_embed.{n}.{leaf}' for leaf in ('weight', 'bias')]
                     if head == 'class_embed' else
                     [f'{prefix}bbox_embed.{n}.layers.{k}.{leaf}' for k in range(3)
                      for leaf in ('weight', 'bias')])
    return keys


@pytest.mark.parametrize('refine,two_stage', [(False, False), (True, False), (True, True)])
def test_official_layout_names(refine, two_stage):
    """Every official name maps onto densevit's model of the same shape (no key left over,
    none missing), and the decoder norms are swapped as the official layer applies them."""
    cfg = tiny('deformable_detr_r50_16xb2-50e_coco.py', 50)
    cfg.merge_from_dict({'model.bbox_head.with_box_refine': refine,
                         'model.bbox_head.as_two_stage': two_stage})
    ours = init_model(cfg).state_dict()
    names = _official_keys(refine, two_stage)
    backbone = [f'backbone.0.body.{k[len("backbone."):]}' for k in ours
                if k.startswith('backbone.') and not k.endswith('num_batches_tracked')]
    sd = {k: torch.full((1,), float(i)) for i, k in enumerate(dict.fromkeys(names + backbone))}
    out = convert_model(sd, strict=True)
    assert out.layout == 'official Deformable DETR'
    assert set(out) == {k for k in ours if not k.endswith('num_batches_tracked')}
    dec = 'bbox_head.transformer.decoder.1.'
    assert out[dec + 'norm1.weight'] == sd['transformer.decoder.layers.1.norm2.weight']
    assert out[dec + 'norm2.weight'] == sd['transformer.decoder.layers.1.norm1.weight']
    if not two_stage:
        assert out['bbox_head.query_embed.weight'] == sd['query_embed.weight']
