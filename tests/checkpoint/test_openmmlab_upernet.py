"""MMSegmentation UperNet + Swin and UperNet + BEiT checkpoints load whole into densevit and
reproduce mmseg's outputs.

The fixture (``tools/dev/openmmlab_fixtures/make_upernet.py``, MMSegmentation 1.2.2) is a
tiny randomised mmseg ``EncoderDecoder(SwinTransformer, UPerHead)`` with one ``FCNHead``
auxiliary head (a dict in its config, as the zoo's), saved as mmengine saves it, with
mmseg's own outputs in eval mode: backbone maps, decode and auxiliary logits and
``predict``'s per-image ``seg_logits`` / ``pred_sem_seg`` on a zero-padded batch of two
sizes (one with another ``ori_shape``) and on two single images, and the losses on the
batch. Here it goes through densevit's public path: ``init_model`` on the repository's
UperNet config, shrunk with ``cfg_options``.

The BEiT fixture (``make_upernet_beit.py``) is the same for mmseg's UperNet-BEiT
(``configs/_base_/models/upernet_beit.py``: ``BEiT``, ``Feature2Pyramid``, the same heads),
loaded into the repository's BEiT config; its inputs all have the model's patch grid, the
only one mmseg's BEiT runs on, and the neck's maps are compared too.
"""
import re
from pathlib import Path

import pytest
import torch
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model, model_layouts
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.model import load_model_weights
from densevit.checkpoint.read import read_checkpoint
from densevit.structures import DataSample

FIXTURES = Path(__file__).parent / 'fixtures'
CKPT = FIXTURES / 'mmseg_upernet_swin.pth'
CONFIG = Path(__file__).parents[2] / 'configs/upernet/upernet_swin_t_512x512_ade20k.py'
TOL = 1e-4
CASES = ['batch', '29x29', '56x56']
# the fixture's architecture on top of the Swin-T recipe (make_upernet.py's CFG)
TINY = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=16, depths=(2, 2), num_heads=(1, 2)),
    'model.backbone.mlp_ratio': 2, 'model.backbone.out_indices': (0, 1),
    'model.decode_head.in_channels': [16, 32], 'model.decode_head.in_index': [0, 1],
    'model.decode_head.channels': 8, 'model.decode_head.num_classes': 5,
    'model.auxiliary_head.in_channels': 16, 'model.auxiliary_head.in_index': 0,
    'model.auxiliary_head.channels': 8, 'model.auxiliary_head.num_classes': 5,
}


@pytest.fixture(scope='module')
def io():
    return torch.load(FIXTURES / 'mmseg_upernet_swin_io.pth', weights_only=True)


@pytest.fixture(scope='module')
def model():
    return init_model(CONFIG, CKPT, cfg_options=TINY)  # strict: everything must load


def _samples(io, case):
    x = io['inputs'][case]
    if case == 'batch':
        shapes, ori = io['inputs']['batch_img_shapes'], io['inputs']['batch_ori_shapes']
    else:
        shapes = ori = torch.tensor([list(x.shape[-2:])])
    return x, [DataSample(metainfo=dict(img_shape=tuple(s), ori_shape=tuple(o)))
               for s, o in zip(shapes.tolist(), ori.tolist(), strict=True)]


def _max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def _max_map_diff(maps, ref):
    return max(_max_diff(o, r) for o, r in zip(maps, ref, strict=True))


def max_diffs(model, io, case):
    """{output: max |densevit - mmseg|} on one fixture input (the neck's maps too, when the
    model has a neck)."""
    ref = io['outputs'][case]
    x, samples = _samples(io, case)
    with torch.no_grad():
        feats = model.backbone(x)
        diffs = {'backbone': _max_map_diff(feats, ref['backbone'])}
        if model.neck is not None:
            feats = model.neck(feats)
            diffs['neck'] = _max_map_diff(feats, ref['neck'])
        diffs.update(decode=_max_diff(model.decode_head(feats), ref['decode']),
                     aux=_max_diff(model.auxiliary_head[0](feats), ref['aux']))
        preds = model.predict(x, samples)
    diffs['seg_logits'] = max(_max_diff(p.seg_logits.data, r)
                              for p, r in zip(preds, ref['seg_logits'], strict=True))
    for p, r in zip(preds, ref['pred_sem_seg'], strict=True):
        assert torch.equal(p.pred_sem_seg.data, r)
    return diffs


@pytest.mark.parametrize('case', CASES)
def test_whole_model_matches_mmseg(model, io, case):
    """Backbone maps, UPerHead and FCNHead logits and predict (padding cut, resized to
    ori_shape) within 1e-4 of mmseg's; the predicted classes equal."""
    assert not model.training and model.backbone.always_shift
    diffs = max_diffs(model, io, case)
    assert max(diffs.values()) <= TOL, diffs


@pytest.mark.parametrize('family', ['swin', 'beit'])
def test_losses_match_mmseg(family, request):
    """The losses on the padded batch (labels 255 on the padding), eval mode: decode and
    auxiliary cross-entropy (weight 0.4) and accuracies equal mmseg's. mmseg averages the
    loss over all pixels, ignored ones included (its default ``avg_non_ignore=False``):
    set here; densevit's default averages over the labelled pixels only."""
    config, ckpt, tiny, io_fixture = FAMILIES[family]
    io = request.getfixturevalue(io_fixture)
    options = {**tiny, 'model.decode_head.loss_decode.avg_non_ignore': False,
               'model.auxiliary_head.loss_decode.avg_non_ignore': False}
    model = init_model(config, ckpt, cfg_options=options)
    assert model.auxiliary_head[0].loss_decode[0].loss_weight == 0.4
    x, samples = _samples(io, 'batch')
    for sample, label in zip(samples, io['inputs']['batch_labels'], strict=True):
        sample.gt_sem_seg = PixelData(data=label[None].long())
    with torch.no_grad():
        ours = model.loss(x, samples)
    ref = io['outputs']['batch']['losses']
    # mmseg names a single auxiliary head's losses aux.*; densevit's always-a-list aux_0.*
    assert set(ours) == {k.replace('aux.', 'aux_0.') for k in ref}
    for key, value in ref.items():
        assert ours[key.replace('aux.', 'aux_0.')].item() == pytest.approx(value.item(),
                                                                          abs=TOL), key


def test_layout_is_recognised_as_mmseg_upernet():
    state_dict = read_checkpoint(CKPT)
    converted = convert_model(state_dict)
    assert converted.layout == 'MMSegmentation UperNet (Swin)'
    assert converted.options == {'always_shift': True}
    # no other family's whole-model layout even considers it
    others = [lay.name for lay in model_layouts(state_dict) if lay.name != converted.layout
              and any(re.search(lay.signature, k) for k in state_dict)]
    assert others == []
    # mmseg's single auxiliary head (no index) is densevit's first; head names unchanged
    assert 'auxiliary_head.0.convs.0.conv.weight' in converted
    assert not any(k.startswith('auxiliary_head.convs') for k in converted)
    heads = {k for k in state_dict if k.startswith('decode_head.')}
    assert heads == {k for k in converted if k.startswith('decode_head.')}


def test_converted_copy_loads_into_the_same_model(model, io, tmp_path):
    """``tools/convert/checkpoint.py`` writes the whole model (no longer its backbone
    alone), with the origin and ``always_shift`` in its meta; it gives the same outputs."""
    from tiny_run import load_tool
    out = tmp_path / 'upernet.pth'
    assert load_tool('tools/convert/checkpoint.py').main([str(CKPT), str(out)]) == 0
    saved = torch.load(out, weights_only=True)
    assert saved['meta'] == {'densevit_origin': 'MMSegmentation UperNet (Swin)',
                             'densevit_options': {'always_shift': True}}
    assert {k.split('.')[0] for k in saved['state_dict']} == {
        'backbone', 'decode_head', 'auxiliary_head'}
    converted = init_model(CONFIG, out, cfg_options=TINY)
    x = io['inputs']['batch']
    with torch.no_grad():
        assert torch.equal(converted(x, mode='tensor'), model(x, mode='tensor'))


def test_pool_branch_order_matters(io):
    """The test can fail: with the pyramid pooling's 1-bin and 6-bin branches swapped, the
    logits are off."""
    model = init_model(CONFIG, CKPT, cfg_options=TINY)
    branches = model.decode_head.psp_modules
    first, last = ({k: v.clone() for k, v in branches[i][1].state_dict().items()}
                   for i in (0, 3))
    branches[0][1].load_state_dict(last)
    branches[3][1].load_state_dict(first)
    x = io['inputs']['56x56']
    with torch.no_grad():
        logits = model.decode_head(model.backbone(x))
    assert _max_diff(logits, io['outputs']['56x56']['decode']) > 1e-2


def test_head_of_other_width_is_refused_naming_both():
    """A config whose UPerHead is wider than the file's: one error naming the file's
    layout and meta, the model the config builds and the tensors' two shapes."""
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(CONFIG, CKPT, cfg_options={**TINY, 'model.decode_head.channels': 16})
    message = str(e.value)
    assert 'mmseg_upernet_swin.pth does not match the model' in message
    assert ('the file is a MMSegmentation UperNet (Swin) checkpoint (mmseg 1.2.2 '
            'EncoderDecoder(SwinTransformer, UPerHead))') in message
    assert 'the config builds EncoderDecoder(SwinTransformer, UPerHead)' in message
    assert ('decode_head.psp_modules.0.1.conv.weight (8, 32, 1, 1) in the file, '
            '(16, 32, 1, 1) in the model') in message


def test_unknown_head_tensor_is_refused_naming_the_layout():
    checkpoint = torch.load(CKPT, weights_only=True)
    checkpoint['state_dict']['decode_head.extra.conv.weight'] = torch.zeros(1)
    model = init_model(CONFIG, cfg_options=TINY)
    with pytest.raises(CheckpointMismatchError,
                       match=r'UperNet \(Swin\) layout.*decode_head\.extra\.conv\.weight'):
        load_model_weights(model, checkpoint, 'extra.pth', strict=True)


def test_fine_tuning_on_other_classes_loads_the_rest(io):
    """``load_from`` (not strict): another class count leaves both classifiers out, loads
    everything else, and the features are mmseg's."""
    model = init_model(CONFIG, cfg_options={**TINY, 'model.decode_head.num_classes': 7,
                                            'model.auxiliary_head.num_classes': 7})
    report = load_model_weights(model, read_checkpoint(CKPT), 'mmseg_upernet_swin.pth',
                                strict=False)
    assert {k for k, _, _ in report.mismatched} == {
        f'{head}.conv_seg.{p}' for head in ('decode_head', 'auxiliary_head.0')
        for p in ('weight', 'bias')}
    assert not report.missing and not report.unexpected
    x = io['inputs']['29x29']
    with torch.no_grad():
        maps = model.eval().backbone(x)
    assert _max_map_diff(maps, io['outputs']['29x29']['backbone']) <= TOL


# UperNet + BEiT ------------------------------------------------------------------------------
BEIT_CKPT = FIXTURES / 'mmseg_upernet_beit.pth'
BEIT_CONFIG = Path(__file__).parents[2] / 'configs/beit/beit_vit-b16_upernet_512x512_ade20k.py'
BEIT_CASES = ['batch', '20x28', '23x31']
# make_upernet_beit.py's architecture on top of BEiT's recipe: mmseg's LayerNorm eps (the
# origin option), its patch convolution's cropping; no pre-trained file
BEIT_TINY = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=16, num_layers=4, num_heads=2,
                                feedforward_channels=32),
    'model.backbone.img_size': (20, 28), 'model.backbone.patch_size': 4,
    'model.backbone.out_indices': (0, 1, 2, 3), 'model.backbone.layer_norm_eps': 1e-6,
    'model.backbone.crop_to_patch': True, 'model.backbone.init_cfg': None,
    'model.neck.embed_dims': 16,
    'model.decode_head.in_channels': [16] * 4, 'model.decode_head.channels': 8,
    'model.decode_head.num_classes': 5,
    'model.auxiliary_head.in_channels': 16, 'model.auxiliary_head.channels': 8,
    'model.auxiliary_head.num_classes': 5,
}


# each fixture's config, checkpoint, options and io fixture, for the tests both run
FAMILIES = {'swin': (CONFIG, CKPT, TINY, 'io'),
            'beit': (BEIT_CONFIG, BEIT_CKPT, BEIT_TINY, 'beit_io')}


@pytest.fixture(scope='module')
def beit_io():
    return torch.load(FIXTURES / 'mmseg_upernet_beit_io.pth', weights_only=True)


@pytest.fixture(scope='module')
def beit_model():
    return init_model(BEIT_CONFIG, BEIT_CKPT, cfg_options=BEIT_TINY)  # strict


@pytest.mark.parametrize('case', BEIT_CASES)
def test_beit_whole_model_matches_mmseg(beit_model, beit_io, case):
    """BEiT's four maps, the Feature2Pyramid maps (strides 1/4 .. 2 of the patch), UPerHead
    and FCNHead logits and predict within 1e-4 of mmseg's; the predicted classes equal."""
    assert not beit_model.training
    diffs = max_diffs(beit_model, beit_io, case)
    assert set(diffs) == {'backbone', 'neck', 'decode', 'aux', 'seg_logits'}
    assert max(diffs.values()) <= TOL, diffs


def test_beit_layout_is_recognised_and_loads_every_tensor(beit_io):
    """The file converts as the UperNet (BEiT) layout with mmseg's eps; every converted tensor
    has a place in the model and every model tensor comes from the file (a strict load); the
    class token's rows of each table become ``extra_token_table``."""
    state_dict = read_checkpoint(BEIT_CKPT)
    converted = convert_model(state_dict)
    assert converted.layout == 'MMSegmentation UperNet (BEiT)'
    assert converted.options == {'layer_norm_eps': 1e-6}
    others = [lay.name for lay in model_layouts(state_dict) if lay.name != converted.layout
              and any(re.search(lay.signature, k) for k in state_dict)]
    assert others == []
    model = init_model(BEIT_CONFIG, cfg_options=BEIT_TINY)
    assert set(converted) == set(model.state_dict())
    table = state_dict['backbone.layers.2.attn.relative_position_bias_table']  # [9 * 13 + 3, 2]
    assert torch.equal(converted['backbone.pos_embed.2.relative_position_bias_table'], table[:-3])
    assert torch.equal(converted['backbone.pos_embed.2.extra_token_table'], table[-3:])
    assert {k for k in converted if k.startswith('neck.')} == {
        k for k in state_dict if k.startswith('neck.')}  # the neck's names unchanged


def test_beit_transposed_table_is_off(beit_io):
    """The test can fail: each relative-position table read with the grid's two sides swapped
    (the 5 x 7 grid's offsets as 7 x 5's) gives other maps."""
    model = init_model(BEIT_CONFIG, BEIT_CKPT, cfg_options=BEIT_TINY)
    with torch.no_grad():
        for module in model.backbone.pos_embed:
            table = module.relative_position_bias_table
            table.copy_(table.reshape(9, 13, -1).transpose(0, 1).reshape(table.shape))
        maps = model.backbone(beit_io['inputs']['20x28'])
    assert _max_map_diff(maps, beit_io['outputs']['20x28']['backbone']) > 1e-2


def test_beit_of_other_depth_is_refused_naming_both():
    """A config with more layers than the file: one error naming the file, its layout and
    meta, the model the config builds and the missing layers' tensors (2 x 15)."""
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(BEIT_CONFIG, BEIT_CKPT, cfg_options={
            **BEIT_TINY, 'model.backbone.arch': {**BEIT_TINY['model.backbone.arch'],
                                                 'num_layers': 6},
            'model.backbone.out_indices': (1, 3, 4, 5)})
    message = str(e.value)
    assert 'mmseg_upernet_beit.pth does not match the model' in message
    assert ('the file is a MMSegmentation UperNet (BEiT) checkpoint (mmseg 1.2.2 '
            'EncoderDecoder(BEiT, Feature2Pyramid, UPerHead)), the config builds '
            'EncoderDecoder(VisionTransformer, Feature2Pyramid, UPerHead)') in message
    assert '34 missing' in message and 'backbone.blocks.4.attn.qkv.weight' in message


def test_bare_mmseg_beit_backbone_file_converts_as_the_whole_models_backbone(beit_model, beit_io):
    """A backbone-only file (mmseg's BEiT keys without ``backbone.``, as its pre-training
    converter writes them) is recognised by the ViT converter and gives the backbone maps of
    the whole model proven above."""
    from densevit.checkpoint.vit import convert_vit
    bare = {k[len('backbone.'):]: v for k, v in read_checkpoint(BEIT_CKPT).items()
            if k.startswith('backbone.')}
    converted = convert_vit(bare, strict=True)
    assert converted.layout == 'MMSegmentation BEiT'
    backbone = init_model(BEIT_CONFIG, cfg_options=BEIT_TINY).backbone.eval()
    backbone.load_state_dict(converted, strict=True)
    with torch.no_grad():
        maps = backbone(beit_io['inputs']['20x28'])
    assert _max_map_diff(maps, beit_io['outputs']['20x28']['backbone']) <= TOL
