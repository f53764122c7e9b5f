"""MMSegmentation 1.x SegFormer checkpoints load into densevit and reproduce mmseg's outputs.

The fixture (``tools/dev/openmmlab_fixtures/make_segformer.py``) is a tiny randomised
mmseg ``EncoderDecoder(MixVisionTransformer, SegformerHead)`` saved as mmengine saves it,
with mmseg's own outputs (eval mode) on a padded two-image batch and a 45x37 image.
Here it goes through densevit's public paths: ``init_model`` on the repository's
SegFormer config (shrunk with ``cfg_options``) for the whole model, and a Pretrained
``init_cfg`` with ``prefix='backbone.'`` for the encoder.
"""
import re
from pathlib import Path

import pytest
import torch

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model, model_layouts
from densevit.checkpoint.mit import convert_mit
from densevit.checkpoint.model import load_model_weights
from densevit.models.backbones.mit import MixVisionTransformer
from densevit.structures import DataSample

FIXTURES = Path(__file__).parent / 'fixtures'
CKPT = FIXTURES / 'mmseg_segformer.pth'
CONFIG = Path(__file__).parents[2] / 'configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
TOL = 1e-4
# the fixture's architecture, on top of the B0 config (mmseg's embed_dims x num_heads widths)
TINY = {
    'model.backbone.arch': None, 'model.backbone.embed_dims': 8,
    'model.backbone.num_heads': [2, 3, 4, 4], 'model.backbone.num_layers': [1, 2, 1, 1],
    'model.backbone.sr_ratios': [4, 2, 2, 1], 'model.backbone.mlp_ratio': 2,
    'model.decode_head.in_channels': [16, 24, 32, 32], 'model.decode_head.channels': 16,
    'model.decode_head.num_classes': 5,
}
BACKBONE = dict(arch=None, embed_dims=8, num_heads=[2, 3, 4, 4], num_layers=[1, 2, 1, 1],
                sr_ratios=[4, 2, 2, 1], mlp_ratio=2)


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmseg_segformer_io.pth', weights_only=True)


@pytest.fixture(scope='module')
def model():
    return init_model(CONFIG, CKPT, cfg_options=TINY)


def _samples(img_shapes, ori_shapes):
    return [DataSample(metainfo=dict(img_shape=tuple(s), ori_shape=tuple(o)))
            for s, o in zip(img_shapes.tolist(), ori_shapes.tolist(), strict=True)]


def _inputs(io, case):
    x = io['inputs'][case]
    if case == 'batch':
        return x, _samples(io['inputs']['batch_img_shapes'], io['inputs']['batch_ori_shapes'])
    shape = torch.tensor([list(x.shape[-2:])])
    return x, _samples(shape, shape)


def _max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


@pytest.mark.parametrize('case', ['batch', 'other'])
def test_whole_model_matches_mmseg(model, io, case):
    ref = io['outputs'][case]
    x, samples = _inputs(io, case)
    assert set(model.backbone.layer_norm_eps.values()) == {1e-6}  # mmseg's, from the config
    with torch.no_grad():
        feats = model.backbone(x)
        for r, o in zip(ref['backbone'], feats, strict=True):
            assert _max_diff(r, o) <= TOL
        assert _max_diff(ref['decode'], model.decode_head(feats)) <= TOL
        preds = model.predict(x, samples)
    for i, pred in enumerate(preds):
        assert _max_diff(ref['seg_logits'][i], pred.seg_logits.data) <= TOL
        assert torch.equal(ref['pred_sem_seg'][i], pred.pred_sem_seg.data)


def test_layout_is_recognised_as_mmseg_segformer():
    state_dict = torch.load(CKPT, weights_only=True)['state_dict']
    converted = convert_model(state_dict)
    assert converted.layout == 'MMSegmentation SegFormer'
    # no other family's whole-model layout (DETR, Deformable DETR, official / HF SegFormer...)
    # even considers it
    others = [lay.name for lay in model_layouts(state_dict) if lay.name != converted.layout
              and any(re.search(lay.signature, k) for k in state_dict)]
    assert others == []
    assert converted.options == {'layer_norm_eps': dict.fromkeys(
        ('patch_embed', 'sr', 'block', 'stage'), 1e-6)}
    # no other backbone layout claims the encoder
    assert convert_mit(state_dict).layout == 'MMSegmentation MiT'


def test_backbone_through_pretrained_init_cfg(io):
    backbone = MixVisionTransformer(**BACKBONE, init_cfg=dict(
        type='Pretrained', checkpoint=str(CKPT), prefix='backbone.'))
    backbone.init_weights()
    backbone.eval()
    x = io['inputs']['other']
    with torch.no_grad():
        for r, o in zip(io['outputs']['other']['backbone'], backbone(x), strict=True):
            assert _max_diff(r, o) <= TOL


def test_linear_head_config_refuses_mmseg_checkpoint():
    # the official / HF form of the head has other per-level weights: a clear error
    with pytest.raises(ValueError,
                       match=r'decode_head\.linear_projs\.0 is a Conv2d.*conv\.weight'):
        init_model(CONFIG, CKPT, cfg_options={**TINY, 'model.decode_head.proj_type': 'linear'})


def test_fuse_blocks_in_mmseg_order_fail(io):
    # the test can fail: without the reversal of the fuse conv's input blocks (mmseg
    # concatenates shallowest first) the logits are wrong
    state = torch.load(CKPT, weights_only=True)
    w = state['state_dict']['decode_head.fusion_conv.conv.weight']
    c = w.shape[0]
    state['state_dict']['decode_head.fusion_conv.conv.weight'] = (
        w.reshape(c, -1, c, 1, 1).flip(1).reshape(w.shape))
    bad = init_model(CONFIG, None, cfg_options=TINY)
    load_model_weights(bad, state, 'mmseg_segformer.pth (fuse blocks reversed)', strict=True)
    x, samples = _inputs(io, 'other')
    with torch.no_grad():
        out = bad.eval().predict(x, samples)[0].seg_logits.data
    assert _max_diff(io['outputs']['other']['seg_logits'][0], out) > 1e-2


@pytest.mark.parametrize('eps', [1e-6, None])  # mmseg's (the config's default), the official mix
def test_a_converted_file_loads_into_the_same_model_as_its_origin(io, tmp_path, log_lines, eps):
    """The mmseg file through ``tools/convert/checkpoint.py``, then loaded, gives the model the
    mmseg file itself gives: its meta records mmseg's eps, so with the config's mmseg eps both
    reproduce mmseg, and with another eps both keep the config's and say so in one line."""
    out = tmp_path / 'converted.pth'
    from tiny_run import load_tool
    assert load_tool('tools/convert/checkpoint.py').main([str(CKPT), str(out)]) == 0
    assert torch.load(out, weights_only=True)['meta']['densevit_origin'] == \
        'MMSegmentation SegFormer'
    options = {**TINY, 'model.backbone.layer_norm_eps': eps}
    x, samples = _inputs(io, 'other')
    logits = []
    for path in (CKPT, out):
        model = init_model(CONFIG, path, cfg_options=options)
        with torch.no_grad():
            logits.append(model.predict(x, samples)[0].seg_logits.data)
    assert torch.equal(logits[0], logits[1])
    ref = io['outputs']['other']['seg_logits'][0]
    warned = [m for _, m in log_lines if 'was built with layer_norm_eps' in m]
    if eps == 1e-6:
        assert _max_diff(ref, logits[1]) <= TOL and not warned
    else:  # before the meta, only the raw file's load said so (the converted one was silent)
        assert len(warned) == 2 and all(
            'its origin (MMSegmentation SegFormer) was built with layer_norm_eps=' in m
            for m in warned)
