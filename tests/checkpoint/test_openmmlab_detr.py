"""MMDetection 3.x DETR checkpoints load into densevit and reproduce mmdet's outputs.

The fixture (``tools/dev/openmmlab_fixtures/make_detr.py``) is mmdet's own
``detr_r50_8xb2-150e_coco.py`` made tiny, every tensor random, saved as mmengine saves
it, with mmdet's outputs on a padded batch, an image of another size and raw images
through the zoo test pipeline. densevit reads it through ``init_model`` with
``configs/detr_resnet50.py``, changed only in size.
"""
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from densevit.apis import inference, init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.detr import MMDET, convert_detr
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.read import load_checkpoint_safely
from densevit.models.backbones.resnet import ResNet
from densevit.structures import DataSample

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / 'configs' / 'detr_resnet50.py'
FIXTURE = ROOT / 'tests' / 'checkpoint' / 'fixtures' / 'mmdet_detr_r50.pth'
IO = FIXTURE.with_name('mmdet_detr_r50_io.pth')
ATOL = 1e-4
# the fixture's sizes (see make_detr.py); everything else is the config's own
TINY = {'model.backbone.base_channels': 4, 'model.backbone.stage_blocks': (1, 1, 1, 1),
        'model.bbox_head.embed_dims': 32, 'model.bbox_head.num_queries': 30,
        'model.bbox_head.num_dets': 20, 'model.bbox_head.positional_encoding.num_feats': 16,
        'model.bbox_head.transformer.num_heads': 4,
        'model.bbox_head.transformer.num_encoder_layers': 1,
        'model.bbox_head.transformer.num_decoder_layers': 2,
        'model.bbox_head.transformer.feedforward_channels': 64}


@pytest.fixture(scope='module')
def io():
    return torch.load(IO, weights_only=True)


@pytest.fixture(scope='module')
def model():
    return init_model(CONFIG, FIXTURE, cfg_options=TINY)


def _case(io, name):
    inp = io['inputs'][name]
    return inp['x'].float(), [DataSample(metainfo=m) for m in inp['metas']], io['outputs'][name]


def _close(a, b):
    assert a.shape == b.shape
    assert (a - b).abs().max() <= ATOL, (a - b).abs().max()


def _same_predictions(samples, ref):
    """Identical labels, scores within ATOL, boxes within ATOL as fractions of the original
    image (pixels: float32 rounding grows with the coordinates, ~1e-4 px at 1333 px)."""
    for ds, r in zip(samples, ref, strict=True):
        pred = ds.pred_instances
        assert torch.equal(pred.labels, r['labels'])
        _close(pred.scores, r['scores'])
        h, w = ds.ori_shape
        size = torch.tensor([w, h, w, h])
        _close(pred.bboxes / size, r['bboxes'] / size)
    assert any(len(r['labels'].unique()) > 1 for r in ref)  # not one class for every query


def test_recognised_as_mmdet_detr_by_every_family():
    state_dict = load_checkpoint_safely(FIXTURE)['state_dict']
    assert convert_model(state_dict).layout == 'MMDetection DETR'
    assert convert_detr(state_dict, strict=True).layout == 'MMDetection DETR'


@pytest.mark.parametrize('name', ['padded', 'other_size'])
def test_logits_and_boxes_of_every_decoder_layer(model, io, name):
    x, samples, ref = _case(io, name)
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
    # queries differ (the fixture spreads them), so a mix-up of query rows would show
    assert ref['logits'].std(dim=2).min() > 1e-2
    _close(out['pred_logits'], ref['logits'])  # [L, B, Q, 80 + 1]
    _close(out['pred_boxes'], ref['boxes'])
    if name == 'padded':  # the comparison covers the padding mask
        with torch.no_grad():
            unmasked = model(x, None, mode='tensor')['pred_logits']
        assert (unmasked[:, 1] - ref['logits'][:, 1]).abs().max() > 1e-2


@pytest.mark.parametrize('name', ['padded', 'other_size'])
def test_predictions(model, io, name):
    x, samples, ref = _case(io, name)
    with torch.no_grad():
        results = model(x, samples, mode='predict')
    assert len(results[0].pred_instances) == 20  # max_per_img of the fixture
    _same_predictions(results, ref['pred'])


def test_raw_images_through_the_config_pipeline(model, io):
    """Resize (1333, 800) keeping the ratio, normalise, pad to one batch, predict: as mmdet
    does, through mmengine's own (ungrouped) ``test_step``. densevit's ``inference`` then
    predicts each size on its own (``densevit/models/size_groups.py``), as batch 1."""
    from mmengine.dataset import pseudo_collate
    from mmengine.model import BaseModel
    from mmengine.registry import DefaultScope

    from densevit.apis.inference import _prepare, split_test_pipeline
    images = [t.numpy() for t in io['inputs']['pipeline']['images']]
    ref = io['outputs']['pipeline']
    with DefaultScope.overwrite_default_scope('densevit'), torch.no_grad():
        load, rest = split_test_pipeline(model.cfg)
        batch = pseudo_collate([_prepare(x, load, rest) for x in images])
        padded = BaseModel.test_step(model, batch)
    assert [list(r.img_shape) for r in padded] == ref['img_shapes']
    assert list(padded[0].batch_input_shape) == ref['batch_input_shape']
    _same_predictions(padded, ref['pred'])
    grouped = inference(model, images, batch_size=2)
    for image, result in zip(images, grouped, strict=True):
        alone = inference(model, image)
        assert torch.equal(result.pred_instances.labels, alone.pred_instances.labels)
        torch.testing.assert_close(result.pred_instances.bboxes, alone.pred_instances.bboxes)


def test_backbone_maps(model, io):
    x, _, ref = _case(io, 'padded')
    with torch.no_grad():
        _close(model.backbone(x)[0], ref['stages'][3])


def test_backbone_alone_through_init_cfg(io):
    """The mmdet ResNet-50 out of the detector file: ``prefix='backbone.'``, every stage."""
    backbone = ResNet(depth=50, base_channels=4, stage_blocks=(1, 1, 1, 1),
                      out_indices=(0, 1, 2, 3), norm_cfg=dict(type='FrozenBN'),
                      init_cfg=dict(type='Pretrained', checkpoint=str(FIXTURE), prefix='backbone.'))
    backbone.init_weights()
    x, _, ref = _case(io, 'padded')
    with torch.no_grad():
        for ours, theirs in zip(backbone.eval()(x), ref['stages'], strict=True):
            _close(ours, theirs)


def test_config_mirrors_the_zoo_config(io):
    zoo = io['inputs']['zoo']
    cfg = Config.fromfile(str(CONFIG))
    head = cfg.model.bbox_head
    assert head.num_classes == zoo['num_classes'] == 80
    assert head.num_queries == zoo['num_queries'] and head.num_dets == zoo['max_per_img']
    pre = cfg.model.data_preprocessor
    for key, value in zoo['data_preprocessor'].items():
        assert pre[key] == value, key
    resize = [s for s in cfg.test_dataloader.dataset.pipeline if s['type'] == 'Resize']
    zoo_resize = [s for s in zoo['test_pipeline'] if s['type'] == 'Resize']
    assert [(tuple(s['scale']), s['keep_ratio']) for s in resize] == \
        [(tuple(s['scale']), s['keep_ratio']) for s in zoo_resize]
    assert cfg.test_dataloader.batch_size == 1


def test_incomplete_or_foreign_files_are_refused(tmp_path):
    ckpt = load_checkpoint_safely(FIXTURE)
    sd = ckpt['state_dict']
    missing = {k: v for k, v in sd.items() if not k.startswith('decoder.post_norm.')}
    torch.save(dict(ckpt, state_dict=missing), tmp_path / 'missing.pth')
    with pytest.raises(CheckpointMismatchError, match=r'2 missing.*decoder_norm'):
        init_model(CONFIG, tmp_path / 'missing.pth', cfg_options=TINY)
    extra = dict(sd, **{'decoder.layers.0.extra.weight': torch.zeros(1)})
    torch.save(dict(ckpt, state_dict=extra), tmp_path / 'extra.pth')
    with pytest.raises(ValueError, match=r'MMDetection DETR layout.*decoder\.layers\.0\.extra'):
        init_model(CONFIG, tmp_path / 'extra.pth', cfg_options=TINY)
    # a sigmoid classifier (K logits, no background) does not fit densevit's K+1 head
    sigmoid = dict(sd, **{'bbox_head.fc_cls.weight': sd['bbox_head.fc_cls.weight'][:80],
                          'bbox_head.fc_cls.bias': sd['bbox_head.fc_cls.bias'][:80]})
    torch.save(dict(ckpt, state_dict=sigmoid), tmp_path / 'sigmoid.pth')
    with pytest.raises(CheckpointMismatchError, match=r'wrong shape.*class_embed'):
        init_model(CONFIG, tmp_path / 'sigmoid.pth', cfg_options=TINY)


def test_other_mmdet_detectors_are_not_taken_for_detr():
    """mmdet Deformable DETR / DINO (deformable cross-attention) and Conditional DETR
    (its own attention) keys never match the MMDetection DETR signature."""
    z = torch.zeros(1)
    deformable = {'encoder.layers.0.self_attn.sampling_offsets.weight': z,
                  'decoder.layers.0.self_attn.attn.in_proj_weight': z,
                  'decoder.layers.0.cross_attn.sampling_offsets.weight': z,
                  'query_embedding.weight': z, 'level_embed': z}
    conditional = {'encoder.layers.0.self_attn.attn.in_proj_weight': z,
                   'decoder.layers.0.cross_attn.qcontent_proj.weight': z,
                   'decoder.layers.0.self_attn.qcontent_proj.weight': z}
    for sd in (deformable, conditional):
        assert not any(re.search(MMDET.signature, k) for k in sd)
        with pytest.raises(ValueError, match='match no known layout'):
            convert_detr(sd)

