"""UNETR (2-D): densevit's ``UNETR`` segmentor with ``UNETRHead`` equals MONAI's
``UNETR(spatial_dims=2)`` on random weights, converted by ``convert_monai_unetr``; the
build-time refusals; the config trains a step and predicts."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData
from monai.networks.nets import UNETR as MonaiUNETR

from densevit.checkpoint.layout import PartialLayoutError
from densevit.checkpoint.monai_unetr import convert_monai_unetr
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.random_init import randomize_

CONFIG = Path(__file__).resolve().parents[2] / 'configs' / 'unetr' / 'unetr_vit_shapes.py'
K, MLP, HEADS = 4, 128, 4
TOL = 1e-4


def _monai(img, feature_size, hidden, **kwargs):
    """MONAI's UNETR (12 blocks, patch 16, instance norm) with every tensor re-drawn."""
    model = MonaiUNETR(in_channels=3, out_channels=K, img_size=(img, img),
                       feature_size=feature_size, hidden_size=hidden, mlp_dim=MLP,
                       num_heads=HEADS, spatial_dims=2, norm_name='instance',
                       dropout_rate=0.0, **kwargs)
    return randomize_(model).eval()


def _build(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg)


def _vit(img, hidden, out_indices=(3, 6, 9, 11), qkv_bias=False, **kwargs):
    return dict(type='VisionTransformer',
                arch=dict(embed_dims=hidden, num_layers=12, num_heads=HEADS,
                          feedforward_channels=MLP),
                img_size=img, patch_size=16, with_cls_token=False, qkv_bias=qkv_bias,
                layer_norm_eps=1e-5, out_indices=out_indices, **kwargs)


def _ours(img, feature_size, hidden, backbone=None, **head):
    return _build(dict(
        type='UNETR', backbone=backbone or _vit(img, hidden),
        decode_head=dict(type='UNETRHead', in_channels=hidden, channels=feature_size,
                         num_classes=K, **head))).eval()


def _images(img):
    return torch.randn(2, 3, img, img, generator=torch.Generator().manual_seed(1))


def _max_diff(a, b):
    return (a - b).abs().max().item()


# (image size, feature_size, hidden width, MONAI options, the same for densevit's head / ViT)
CASES = {
    'defaults': (64, 8, 64, {}, {}),
    'wider': (96, 16, 96, {}, {}),
    'plain_blocks_qkv_bias': (64, 8, 64, dict(res_block=False, conv_block=False, qkv_bias=True),
                              dict(res_block=False, conv_block=False)),
    'perceptron_patches': (64, 8, 64, dict(proj_type='perceptron'), {}),
}


@pytest.mark.parametrize('case', CASES)
def test_logits_equal_monai(case):
    img, feature_size, hidden, monai_kwargs, head = CASES[case]
    ref = _monai(img, feature_size, hidden, **monai_kwargs)
    backbone = _vit(img, hidden, qkv_bias=monai_kwargs.get('qkv_bias', False))
    ours = _ours(img, feature_size, hidden, backbone=backbone, **head)
    ours.load_state_dict(convert_monai_unetr(ref.state_dict()), strict=True)
    x = _images(img)
    with torch.no_grad():
        expected = ref(x)
        got = ours(x, mode='tensor')
        # whole-image prediction: the same logits, at the input size
        predicted = torch.stack([ds.seg_logits.data for ds in ours.predict(x)])
    assert got.shape == expected.shape == (2, K, img, img)
    assert expected.abs().max() > 1  # random weights give logits that are not near zero
    assert _max_diff(got, expected) < TOL
    assert _max_diff(predicted, expected) < TOL


def test_hidden_states_are_monais_and_another_choice_differs():
    """The maps are MONAI's hidden_states_out[3], [6], [9] (not normed) and the normed last
    output; the paper's z3, z6, z9 read literally (layers 2, 5, 8) give other logits."""
    img, feature_size, hidden = 64, 8, 64
    ref = _monai(img, feature_size, hidden)
    converted = convert_monai_unetr(ref.state_dict())
    ours = _ours(img, feature_size, hidden)
    ours.load_state_dict(converted, strict=True)
    x = _images(img)
    with torch.no_grad():
        last, states = ref.vit(x)
        maps = ours.extract_feat(x)
    assert maps[0] is x
    for got, want in zip(maps[1:], [*(states[i] for i in (3, 6, 9)), last], strict=True):
        assert _max_diff(got, ref.proj_feat(want)) < TOL
    shifted = _ours(img, feature_size, hidden, backbone=_vit(img, hidden, (2, 5, 8, 11)))
    shifted.load_state_dict(converted, strict=True)
    with torch.no_grad():
        assert _max_diff(shifted(x, mode='tensor'), ref(x)) > 1e-2


def test_converter_refuses_norm_parameters():
    """MONAI's batch norm (or an affine instance norm) has tensors that densevit's instance
    norm does not: the keys are named, nothing is converted in part."""
    ref = MonaiUNETR(in_channels=3, out_channels=K, img_size=64, feature_size=8,
                     hidden_size=64, mlp_dim=MLP, num_heads=HEADS, spatial_dims=2,
                     norm_name='batch')
    with pytest.raises(PartialLayoutError, match=r'encoder1\.layer\.norm1'):
        convert_monai_unetr(ref.state_dict())


# ---------------------------------------------------------------- build-time refusals

@pytest.mark.parametrize('backbone,message', [
    (_vit(64, 64, out_indices=(11,)),
     r'4 hidden states .* got VisionTransformer with out_indices \[11\]: 1 map'),
    (_vit(64, 64, out_indices=(2, 5, 8, 10, 11)),
     r'got VisionTransformer with out_indices \[2, 5, 8, 10, 11\]: 5 map'),
    (dict(_vit(64, 64), patch_size=8), r'stride 16; got VisionTransformer with strides \[8, 8'),
    (dict(type='MixVisionTransformer', arch='b0'),
     r'stride 16; got MixVisionTransformer with strides \[4, 8, 16, 32\]'),
])
def test_backbone_without_four_hidden_states_is_refused_at_build(backbone, message):
    with pytest.raises(ValueError, match=message):
        _build(dict(type='UNETR', backbone=backbone,
                    decode_head=dict(type='UNETRHead', in_channels=64, num_classes=K)))


def test_other_bad_builds_are_refused():
    head = dict(type='UNETRHead', in_channels=32, num_classes=K)
    with pytest.raises(ValueError, match=r'in_channels is 32 .* maps of \[64, 64, 64, 64\]'):
        _build(dict(type='UNETR', backbone=_vit(64, 64), decode_head=head))
    with pytest.raises(ValueError, match="no neck"):
        _build(dict(type='UNETR', backbone=_vit(64, 64), neck=dict(type='MLANeck'),
                    decode_head=dict(head, in_channels=64)))
    with pytest.raises(ValueError, match=r'reads 4 hidden states .* in_channels=\[64, 64, 64\]'):
        _build(dict(head, in_channels=[64, 64, 64]))
    ours = _ours(64, 8, 64, backbone=_vit(64, 64, pad_to_patch=True))
    with pytest.raises(ValueError, match=r'\(56, 64\) .* multiple of 16'):
        ours(torch.zeros(1, 3, 56, 64), mode='tensor')


# ---------------------------------------------------------------- the config

def test_config_trains_a_step_and_predicts():
    cfg = Config.fromfile(str(CONFIG))
    torch.manual_seed(0)
    model = _build(cfg.model)
    model.init_weights()
    with DefaultScope.overwrite_default_scope('densevit'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    size = cfg.img_size

    def batch(shape):
        label = torch.randint(0, K, shape)
        return dict(inputs=[torch.randint(0, 256, (3, *shape), dtype=torch.uint8)] * 2,
                    data_samples=[DataSample(gt_sem_seg=PixelData(data=label[None]),
                                             metainfo=dict(img_shape=shape, ori_shape=shape))
                                  for _ in range(2)])
    before = [p.detach().clone() for p in model.parameters()]
    log = model.train_step(batch((size, size)), optim)
    assert torch.isfinite(log['loss']) and 'decode.loss_dice' in log
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    out = model.val_step(batch((40, 56)))  # padded to 48 x 64 inside, cut back after
    assert out[0].pred_sem_seg.data.shape == (1, 40, 56)
    assert out[0].seg_logits.data.shape == (K, 40, 56)
