"""Tests for the Mix Transformer (SegFormer encoder) and its checkpoint converters."""
import re
from pathlib import Path

import pytest
import torch

from densevit.apis import init_model
from densevit.checkpoint.mit import convert_mit, convert_segformer, detect_mit_layout
from densevit.models.backbones.mit import ARCH_SETTINGS, MixVisionTransformer
from densevit.models.heads.segformer_head import SegformerHead
from densevit.registry import MODELS
from densevit.utils.random_init import randomize_

TINY = dict(arch=None, embed_dims=[8, 16, 24, 32], num_layers=[1, 1, 1, 1],
            num_heads=[1, 1, 2, 2])

# SegFormer paper, Table 6 / Sec. 4: encoder parameters in millions.
PAPER_M = {'b0': 3.4, 'b1': 13.1, 'b2': 24.2, 'b3': 44.0, 'b4': 60.8, 'b5': 81.4}


@pytest.mark.parametrize('arch', list(ARCH_SETTINGS))
def test_param_counts_match_paper(arch):
    with torch.device('meta'):  # no memory, no init: B5 stays instant
        model = MixVisionTransformer(arch=arch)
    count = sum(p.numel() for p in model.parameters()) / 1e6
    # B0 counts 3.32M, exactly what HF's SegformerModel (and the official
    # code) build for it (see test_param_counts_equal_hf); the paper rounds
    # it to 3.4, 2.4% off. B1-B5 agree to 0.4%.
    tol = 0.025 if arch == 'b0' else 0.02
    assert abs(count - PAPER_M[arch]) / PAPER_M[arch] < tol


def test_shapes_strides_any_size():
    model = MixVisionTransformer(**TINY).eval()
    assert model.out_channels == [8, 16, 24, 32]
    assert model.out_strides == [4, 8, 16, 32]
    outs = model(torch.randn(2, 3, 67, 45))  # not a multiple of 32: each stage rounds up
    assert [tuple(o.shape) for o in outs] == [
        (2, 8, 17, 12), (2, 16, 9, 6), (2, 24, 5, 3), (2, 32, 3, 2)]


def test_out_indices_subset_and_int_embed_dims():
    # mmseg's convention: embed_dims=8 -> widths 8 * num_heads.
    model = MixVisionTransformer(arch=None, embed_dims=8, num_layers=[1, 1, 1, 1],
                                 num_heads=[1, 2, 3, 4], out_indices=(1, 3))
    assert model.embed_dims == [8, 16, 24, 32]
    assert model.out_channels == [16, 32] and model.out_strides == [8, 32]
    outs = model(torch.randn(1, 3, 32, 32))
    assert [o.shape[1] for o in outs] == [16, 32]


def test_arch_errors():
    with pytest.raises(KeyError, match='b0'):
        MixVisionTransformer(arch='b9')
    with pytest.raises(ValueError, match='embed_dims and num_layers'):
        MixVisionTransformer(arch=None)


def test_registry_build():
    with torch.device('meta'):
        model = MODELS.build(dict(type='MixVisionTransformer', arch='b2'))
    assert model.num_layers == [3, 4, 6, 3]


def test_with_cp_same_gradients():
    torch.manual_seed(0)
    plain = MixVisionTransformer(**TINY, drop_path_rate=0.).train()
    ckpt = MixVisionTransformer(**TINY, drop_path_rate=0., with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 32, 32)
    for model in (plain, ckpt):
        sum(o.square().mean() for o in model(x)).backward()
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


# ---------------------------------------------------------------- converters
def _to_official(state_dict):
    """Our names -> official NVlabs names (the inverse of the documented rename)."""
    out = {}
    for k, v in state_dict.items():
        k = re.sub(r'stages\.(\d+)\.patch_embed\.', lambda m: f'patch_embed{int(m[1]) + 1}.', k)
        k = re.sub(r'stages\.(\d+)\.blocks\.', lambda m: f'block{int(m[1]) + 1}.', k)
        k = re.sub(r'stages\.(\d+)\.norm\.', lambda m: f'norm{int(m[1]) + 1}.', k)
        out[k.replace('mlp.dwconv.', 'mlp.dwconv.dwconv.')] = v
    return out


def test_official_layout_converts_back():
    ours = MixVisionTransformer(**TINY).state_dict()
    official = _to_official(ours)
    assert 'block1.0.attn.kv.weight' in official and 'norm4.bias' in official
    official['head.weight'] = torch.zeros(10, 32)  # ImageNet classifier: dropped
    assert detect_mit_layout(official) == 'official'
    converted = convert_mit(official)
    assert converted.keys() == ours.keys()
    assert all(torch.equal(converted[k], ours[k]) for k in ours)
    # a segmentor checkpoint: backbone.* plus a wrapper
    wrapped = {'state_dict': {'backbone.' + k: v for k, v in official.items()}}
    assert convert_mit(wrapped).keys() == ours.keys()


def _official_whole(backbone, head):
    """An official NVlabs whole-model state dict holding ``backbone`` and ``head``'s tensors."""
    ckpt = {'backbone.' + k: v for k, v in _to_official(backbone.state_dict()).items()}
    hs = head.state_dict()
    for i in range(4):  # official: Linear MLPs named linear_c1..linear_c4
        ckpt[f'decode_head.linear_c{i + 1}.proj.weight'] = hs[f'linear_projs.{i}.weight'][:, :, 0, 0]
        ckpt[f'decode_head.linear_c{i + 1}.proj.bias'] = hs[f'linear_projs.{i}.bias']
    # fuse.conv / fuse.bn -> linear_fuse.conv / linear_fuse.bn (an mmcv ConvModule there too)
    ckpt.update({'decode_head.linear_' + k: v for k, v in hs.items() if k.startswith('fuse.')})
    ckpt.update({'decode_head.linear_pred.' + k.split('.')[-1]: v
                 for k, v in hs.items() if k.startswith('conv_seg.')})
    ckpt['decode_head.conv_seg.weight'] = torch.zeros(5, 16, 1, 1)  # unused leftover
    ckpt['decode_head.conv_seg.bias'] = torch.zeros(5)
    return ckpt


def test_official_segformer_checkpoint():
    backbone = MixVisionTransformer(**TINY)
    head = SegformerHead(in_channels=[8, 16, 24, 32], channels=16, num_classes=5)
    hs = head.state_dict()
    converted = convert_segformer({'state_dict': _official_whole(backbone, head), 'meta': {}})
    expected = {**{'backbone.' + k: v for k, v in backbone.state_dict().items()},
                **{'decode_head.' + k: v for k, v in hs.items()}}
    assert converted.keys() == expected.keys()
    assert all(torch.equal(converted[k], v) for k, v in expected.items())


def test_official_keys_convert_to_a_strict_load():
    """Converting is the loaders' job (init_cfg, load_from, init_model): load_state_dict
    takes densevit's own names only."""
    src = MixVisionTransformer(**TINY)
    dst = MixVisionTransformer(**TINY)
    with pytest.raises(RuntimeError, match='Missing key'):
        dst.load_state_dict(_to_official(src.state_dict()), strict=True)
    dst.load_state_dict(convert_mit(_to_official(src.state_dict())), strict=True)
    assert all(torch.equal(a, b) for a, b in zip(src.state_dict().values(),
                                                  dst.state_dict().values(), strict=True))


def test_pretrained_init_cfg_loads_official_file(tmp_path):
    src = MixVisionTransformer(**TINY)
    path = tmp_path / 'mit_tiny.pth'
    torch.save(_to_official(src.state_dict()), path)
    dst = MixVisionTransformer(**TINY, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    dst.init_weights()
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k


def test_unknown_layout_raises_with_keys():
    with pytest.raises(ValueError, match='encoder.layers.0.weight'):
        convert_mit({'encoder.layers.0.weight': torch.zeros(1)})
    official = _to_official(MixVisionTransformer(**TINY).state_dict())
    official['block1.0.attn.rel_bias'] = torch.zeros(1)
    with pytest.raises(ValueError, match=r'block1\.0\.attn\.rel_bias'):
        convert_mit(official)


# ------------------------------------------------ Hugging Face equality proofs
def _hf_config():
    transformers = pytest.importorskip('transformers')
    return transformers, transformers.SegformerConfig(
        hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2],
        decoder_hidden_size=16, num_labels=5)


def _tiny_mit_like_hf():
    # HF builds every LayerNorm with eps 1e-5 (the official code: 1e-5 / 1e-6 mixed)
    return MixVisionTransformer(**TINY, layer_norm_eps=1e-5).eval()


def test_hf_encoder_outputs_equal():
    transformers, cfg = _hf_config()
    hf = randomize_(transformers.SegformerModel(cfg)).eval()
    ours = _tiny_mit_like_hf()  # HF's eps, set in the config
    ours.load_state_dict(convert_mit(hf.state_dict()), strict=True)
    x = torch.randn(2, 3, 67, 45)
    with torch.no_grad():
        ref = hf(pixel_values=x, output_hidden_states=True).hidden_states
        out = ours(x)
    assert len(ref) == len(out) == 4
    for r, o in zip(ref, out, strict=True):
        assert r.shape == o.shape  # HF hidden_states are the per-stage NCHW maps
        assert (r - o).abs().max() <= 1e-4


def test_hf_segformer_logits_equal():
    transformers, cfg = _hf_config()
    hf = randomize_(transformers.SegformerForSemanticSegmentation(cfg)).eval()
    converted = convert_segformer(hf.state_dict())
    assert converted.options == {'layer_norm_eps': dict.fromkeys(
        ('patch_embed', 'sr', 'block', 'stage'), 1e-5)}
    backbone = _tiny_mit_like_hf()
    head = SegformerHead(in_channels=[8, 16, 24, 32], channels=16, num_classes=5).eval()
    backbone.load_state_dict({k[len('backbone.'):]: v for k, v in converted.items()
                              if k.startswith('backbone.')}, strict=True)
    head.load_state_dict({k[len('decode_head.'):]: v for k, v in converted.items()
                          if k.startswith('decode_head.')}, strict=True)
    assert len(converted) == len(backbone.state_dict()) + len(head.state_dict())
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        ref = hf(pixel_values=x).logits
        out = head(backbone(x))
    assert ref.shape == out.shape == (2, 5, 16, 12)
    assert (ref - out).abs().max() <= 1e-4


# transformers 5.x names -> 4.x names (what checkpoints on the Hub hold).
_HF_LEGACY = [
    (r'stages\.(\d+)\.patch_embeddings\.', r'encoder.patch_embeddings.\1.'),
    (r'stages\.(\d+)\.blocks\.', r'encoder.block.\1.'),
    (r'stages\.(\d+)\.layer_norm\.', r'encoder.layer_norm.\1.'),
    (r'attention\.q_proj', 'attention.self.query'),
    (r'attention\.k_proj', 'attention.self.key'),
    (r'attention\.v_proj', 'attention.self.value'),
    (r'attention\.o_proj', 'attention.output.dense'),
    (r'attention\.sequence_reduction\.sequence_reduction', 'attention.self.sr'),
    (r'attention\.sequence_reduction\.layer_norm', 'attention.self.layer_norm'),
    (r'mlp\.fc1', 'mlp.dense1'), (r'mlp\.fc2', 'mlp.dense2'),
    (r'layernorm_before', 'layer_norm_1'), (r'layernorm_after', 'layer_norm_2'),
    (r'decode_head\.linear_projections', 'decode_head.linear_c')]


def test_hf_legacy_layout(tmp_path):
    transformers, cfg = _hf_config()
    safetensors = pytest.importorskip('safetensors.torch')
    hf = randomize_(transformers.SegformerForSemanticSegmentation(cfg)).eval()
    new = hf.state_dict()
    legacy = {}
    for k, v in new.items():
        for pattern, repl in _HF_LEGACY:
            k = re.sub(pattern, repl, k)
        legacy[k] = v.clone()
    # These are really the 4.x names: transformers itself loads them back.
    cfg.save_pretrained(tmp_path)
    safetensors.save_file(legacy, str(tmp_path / 'model.safetensors'), metadata={'format': 'pt'})
    _, info = transformers.SegformerForSemanticSegmentation.from_pretrained(
        tmp_path, output_loading_info=True)
    assert not info['missing_keys'] and not info['unexpected_keys']

    assert detect_mit_layout(legacy) == 'hf_legacy'
    a, b = convert_segformer(legacy), convert_segformer(new)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('arch', ['b0', 'b5'])
def test_param_counts_equal_hf(arch):
    transformers = pytest.importorskip('transformers')
    s = ARCH_SETTINGS[arch]
    cfg = transformers.SegformerConfig(hidden_sizes=s['embed_dims'], depths=s['num_layers'])
    with torch.device('meta'):
        hf = transformers.SegformerModel(cfg)
        ours = MixVisionTransformer(arch=arch)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())


# --------------------------------------------- whole models through init_model
CONFIG = Path(__file__).parents[2] / 'configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
# the tiny model above, in the repository's SegFormer config with the paper's Linear head
TINY_CFG = {
    'model.backbone.arch': None, 'model.backbone.embed_dims': [8, 16, 24, 32],
    'model.backbone.num_layers': [1, 1, 1, 1], 'model.backbone.num_heads': [1, 1, 2, 2],
    'model.decode_head.in_channels': [8, 16, 24, 32], 'model.decode_head.channels': 16,
    'model.decode_head.num_classes': 5, 'model.decode_head.proj_type': 'linear'}


def test_hf_segformer_through_init_model(tmp_path):
    transformers, cfg = _hf_config()
    hf = randomize_(transformers.SegformerForSemanticSegmentation(cfg), seed=3).eval()
    path = tmp_path / 'hf_segformer.pth'
    torch.save(hf.state_dict(), path)
    model = init_model(CONFIG, path, cfg_options={**TINY_CFG, 'model.backbone.layer_norm_eps': 1e-5})
    assert set(model.backbone.layer_norm_eps.values()) == {1e-5}
    for size in [(64, 48), (45, 77)]:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref = hf(pixel_values=x).logits
            out = model.decode_head(model.backbone(x))
            pred = model.predict(x)
        assert (ref - out).abs().max() <= 1e-4
        full = torch.nn.functional.interpolate(ref, size=size, mode='bilinear',
                                               align_corners=False)
        for i, p in enumerate(pred):
            assert (full[i] - p.seg_logits.data).abs().max() <= 1e-4
    # the MMSegmentation form of the head (the config's default) is another architecture
    with pytest.raises(ValueError, match=r'linear_projs\.0 is a ConvModule.*\[.weight., .bias.\]'):
        init_model(CONFIG, path, cfg_options={**TINY_CFG,
                                              'model.decode_head.proj_type': 'conv_norm_act'})


def test_official_segformer_through_init_model_with_the_official_eps(tmp_path):
    backbone = randomize_(MixVisionTransformer(**TINY), seed=1)
    head = randomize_(SegformerHead(in_channels=[8, 16, 24, 32], channels=16, num_classes=5),
                      seed=2)
    ckpt = _official_whole(backbone, head)
    path = tmp_path / 'segformer.tiny.pth'
    torch.save({'state_dict': ckpt, 'meta': {}}, path)
    # None: the official code's eps mix (the config's default is mmseg's 1e-6)
    model = init_model(CONFIG, path, cfg_options={**TINY_CFG, 'model.backbone.layer_norm_eps': None})
    assert model.backbone.layer_norm_eps == dict(patch_embed=1e-5, sr=1e-5, block=1e-6,
                                                 stage=1e-6)
    x = torch.randn(1, 3, 40, 56)
    with torch.no_grad():
        ref = head.eval()(backbone.eval()(x))
        assert (model.decode_head(model.backbone(x)) - ref).abs().max() <= 1e-5


def test_config_eps_wins_over_checkpoint_origin(tmp_path, log_lines):
    transformers, cfg = _hf_config()
    hf = randomize_(transformers.SegformerModel(cfg))
    torch.save(hf.state_dict(), tmp_path / 'hf.pth')
    ours = MixVisionTransformer(**TINY, layer_norm_eps=dict(block=1e-4), init_cfg=dict(
        type='Pretrained', checkpoint=str(tmp_path / 'hf.pth')))
    ours.init_weights()
    assert ours.layer_norm_eps == dict(patch_embed=1e-5, sr=1e-5, block=1e-4, stage=1e-6)
    (line,) = [m for _, m in log_lines if 'was built with layer_norm_eps' in m]
    assert "this model keeps layer_norm_eps={'patch_embed': 1e-05, 'sr': 1e-05, 'block': " \
           "0.0001, 'stage': 1e-06} from its config" in line
    with pytest.raises(KeyError, match='kinds'):
        MixVisionTransformer(**TINY, layer_norm_eps=dict(blocks=1e-6))
