"""densevit's EoMT equals HF transformers' ``EomtForUniversalSegmentation`` (the reference)
with the weights of an HF file (``save_pretrained``'s ``model.safetensors``, every saved tensor
re-drawn by ``randomize_``) converted on load, at two tiny sizes (an MLP ViT/8 with two
registers and queries in 2 of 4 blocks; a SwiGLU ViT/16 with one register and queries in 3 of
4 blocks):

- eval, the masking probabilities 0 (a trained model's): class and mask logits within 1e-4;
- eval with masked attention at probability 1 (HF's freshly built state; densevit's
  ``test_cfg.masked_attention``): every block's predictions within 1e-4, and they differ from
  the unmasked ones (the masks matter);
- training in float64 with masking probabilities below 1 and every random draw (the
  per-query masking draw, the matcher's points, the loss's oversampled and random points)
  made once here and given to both: every block's predictions, the Hungarian matches, every
  block's class / mask / dice losses and every parameter's gradient equal HF's;
- the file loads whole through ``init_model`` (with configs/eomt's recipe shrunk to the
  file's sizes) and ``tools/test.py``.

HF keeps two non-weights in the file, re-drawn like the rest: ``attn_mask_probs`` (set by
each test) and its loss's class weights ``criterion.empty_weight`` (put back to ones and the
no-object weight 0.1 for the loss comparison; densevit's converter drops them).
"""
import copy
from types import SimpleNamespace

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.eomt import convert_eomt
from densevit.checkpoint.read import read_checkpoint
from densevit.models.segmentors.mask_targets import mask_targets
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.random_init import randomize_

from hf_mask_classifiers import (
    GivenDraws,
    compare_gradients,
    criterion_cfg,
    hf_rand,
    max_diffs,
    recorded,
    saved_random_model,
)
from tiny_run import REPO, isolated, load_tool, unique_names

transformers = pytest.importorskip('transformers')

NUM_POINTS = 20  # matching and loss points; oversampled 60, uncertain 15, random 5
SIZES = {
    'mlp-p8': dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, image_size=32,
                   patch_size=8, num_register_tokens=2, num_blocks=2, num_queries=6,
                   num_labels=3, probs=(1.0, 0.5)),
    'swiglu-p16': dict(hidden_size=48, num_hidden_layers=4, num_attention_heads=3,
                       image_size=64, patch_size=16, num_register_tokens=1, num_blocks=3,
                       num_queries=5, num_labels=4, use_swiglu_ffn=True,
                       probs=(0.8, 1.0, 0.4)),
}
CONFIG = REPO / 'configs' / 'eomt' / 'eomt_vit_shapes_semantic.py'


def hf_config(size):
    kwargs = {k: v for k, v in SIZES[size].items() if k != 'probs'}
    return transformers.EomtConfig(train_num_points=NUM_POINTS, **kwargs)


def densevit_cfg(hf):
    """densevit's EoMT for an HF config (see densevit/checkpoint/eomt.py)."""
    c = hf.config
    return dict(
        type='EoMT', num_queries=c.num_queries, num_blocks=c.num_blocks,
        backbone=dict(type='VisionTransformer',
                      arch=dict(embed_dims=c.hidden_size, num_layers=c.num_hidden_layers,
                                num_heads=c.num_attention_heads,
                                feedforward_channels=c.hidden_size * c.mlp_ratio),
                      img_size=c.image_size, patch_size=c.patch_size,
                      num_register_tokens=c.num_register_tokens, layer_scale_init_value=1.0,
                      ffn_type='swiglu' if c.use_swiglu_ffn else 'mlp'),
        decode_head=dict(type='EoMTHead', num_classes=c.num_labels,
                         num_upscale_blocks=c.num_upscale_blocks,
                         criterion=criterion_cfg(c)))


@pytest.fixture(scope='module', params=list(SIZES))
def hf_file(request, tmp_path_factory):
    """(size, HF model in eval mode with every saved tensor random, its model.safetensors)."""
    model, path = saved_random_model(transformers.EomtForUniversalSegmentation, hf_config(request.param),
                                     tmp_path_factory.mktemp(f'hf_eomt_{request.param}'))
    return request.param, model, path


def loaded(hf, path, **test_cfg):
    """densevit's EoMT built for ``hf`` with the file at ``path`` converted (strictly)."""
    sd = convert_model(read_checkpoint(path), strict=True)
    assert sd.layout == 'Hugging Face EoMT'
    cfg = densevit_cfg(hf)
    cfg['test_cfg'] = test_cfg
    with DefaultScope.overwrite_default_scope('densevit'):
        ours = MODELS.build(cfg)
    ours.load_state_dict(sd, strict=True)
    return ours.eval()


def images(hf, dtype=torch.float32):
    s = hf.config.image_size
    return torch.randn(2, 3, s, s, generator=torch.Generator().manual_seed(0), dtype=dtype)


def set_probs(model, probs):
    with torch.no_grad():
        model.attn_mask_probs.copy_(torch.as_tensor(probs))


def test_eval_outputs_match_hf(hf_file):
    """A trained model's state (probabilities 0): no masked attention, final predictions."""
    size, hf, path = hf_file
    hf = copy.deepcopy(hf)
    set_probs(hf, [0.0] * hf.config.num_blocks)
    ours = loaded(hf, path)
    set_probs(ours, [0.5] * hf.config.num_blocks)  # ignored at inference
    x = images(hf)
    with torch.no_grad():
        ref = hf(pixel_values=x)
        out = ours(x, mode='tensor')
    assert len(out['mask_logits']) == 1
    # the queries predict different things: a mix-up of query rows would show
    assert ref.class_queries_logits.std(dim=1).min() > 1e-2
    assert ref.masks_queries_logits.std(dim=1).min() > 1e-2
    mask, cls = max_diffs(out, [ref.masks_queries_logits], [ref.class_queries_logits])
    print(f'{size} eval: max |mask logits - HF| {mask:.2e}, class logits {cls:.2e}')
    assert mask <= 1e-4 and cls <= 1e-4


def test_eval_masked_attention_per_block_matches_hf(hf_file):
    """HF as built (probabilities 1) masks in eval too; so does densevit with
    ``test_cfg.masked_attention``: every block's predictions equal."""
    size, hf, path = hf_file
    hf = copy.deepcopy(hf)
    set_probs(hf, [1.0] * hf.config.num_blocks)
    calls = []
    hf.predict = recorded(calls, hf.predict)
    ours = loaded(hf, path, masked_attention=True)
    set_probs(ours, [1.0] * hf.config.num_blocks)
    x = images(hf)
    with torch.no_grad():
        hf(pixel_values=x)
        out = ours(x, mode='tensor')
        unmasked = loaded(hf, path)(x, mode='tensor')
    assert len(calls) == hf.config.num_blocks + 1
    mask, cls = max_diffs(out, [m for m, _ in calls], [c for _, c in calls])
    print(f'{size} eval, masked attention: max |mask logits - HF| {mask:.2e}, class {cls:.2e}')
    assert mask <= 1e-4 and cls <= 1e-4
    assert (out['mask_logits'][-1] - unmasked['mask_logits'][-1]).abs().max() > 1e-2


# ---------------------------------------------------------------- training, float64

def label_maps(hf):
    """Two label maps of the image size: a few rectangles of classes 0..K-1 over class 1 (or
    2), and a band of ignored pixels (255) in the first."""
    s, K = hf.config.image_size, hf.config.num_labels
    a = torch.ones(s, s, dtype=torch.long)
    a[: s // 2, : s // 3] = 0
    a[s // 3:, s // 2:] = K - 1
    a[-3:, :] = 255
    b = torch.full((s, s), 2 % K, dtype=torch.long)
    b[s // 4: 3 * s // 4, s // 8: s // 2] = 0
    return [a, b]


def make_draws(hf, targets, probs):
    """Every random draw of one training step, by name, made once."""
    g = torch.Generator().manual_seed(5)
    c = hf.config
    B, Q, N = 2, c.num_queries, c.num_blocks
    M = sum(min(Q, len(t['labels'])) for t in targets)  # matched pairs per prediction set

    def u(*shape):
        return torch.rand(shape, generator=g, dtype=torch.float64)
    return {
        'query_unmask': [u(B, Q) for p in probs if 0 < p < 1],
        'match_points': [u(NUM_POINTS, 2) for _ in range((N + 1) * B)],
        'oversampled_points': [u(M, 3 * NUM_POINTS, 2) for _ in range(N + 1)],
        'random_points': [u(M, NUM_POINTS - int(0.75 * NUM_POINTS), 2) for _ in range(N + 1)],
    }


def float64_safe_sdpa(monkeypatch):
    """HF builds its additive attention mask in float32 (``.float()``) whatever the model's
    dtype, and PyTorch's CPU SDPA given a float32 mask with float64 (non-contiguous) queries
    computes wrong values (by 3 here; a bool or float64 mask: right). So HF's SDPA gets its
    mask in the queries' dtype: the same 0 / -1e9 values."""
    from transformers.models.eomt import modeling_eomt
    functions = modeling_eomt.ALL_ATTENTION_FUNCTIONS
    sdpa = functions['sdpa']

    def same_dtype(module, query, key, value, attention_mask, **kwargs):
        if attention_mask is not None:
            attention_mask = attention_mask.to(query.dtype)
        return sdpa(module, query, key, value, attention_mask, **kwargs)
    monkeypatch.setattr(functions, 'get_interface', lambda name, default: same_dtype)


@pytest.fixture
def float64_step(hf_file, monkeypatch):
    """One training step of both models in float64 with the same draws, everything recorded."""
    size, hf, path = hf_file
    probs = SIZES[size]['probs']
    hf = copy.deepcopy(hf).double().train()
    set_probs(hf, probs)
    with torch.no_grad():  # HF's loss weights: ones, the no-object weight last
        hf.criterion.empty_weight.fill_(1.0)
        hf.criterion.empty_weight[-1] = hf.config.no_object_weight
    ours = loaded(hf, path).double().train()
    set_probs(ours, probs)
    x = images(hf, torch.float64)
    samples = [DataSample(gt_sem_seg=PixelData(data=lab[None]),
                          metainfo=dict(img_shape=tuple(lab.shape))) for lab in label_maps(hf)]
    targets = mask_targets(samples, x.shape[-2:], x.device, hf.config.num_labels)
    draws = make_draws(hf, targets, probs)

    r = SimpleNamespace(size=size, hf=hf, ours=ours, x=x, hf_preds=[], hf_losses=[],
                        hf_matches=[], ours_matches=[], draws=draws)
    hf.predict = recorded(r.hf_preds, hf.predict)
    hf.get_loss_dict = recorded(r.hf_losses, hf.get_loss_dict)
    hf.criterion.matcher.forward = recorded(r.hf_matches, hf.criterion.matcher.forward)
    matcher = ours.decode_head.criterion.matcher
    ours.decode_head.criterion.matcher = recorded(r.ours_matches, matcher)
    ours.draws = GivenDraws(draws)
    ours_preds = []
    ours.decode_head.forward = recorded(ours_preds, ours.decode_head.forward)

    r.losses = ours.loss(x, samples)
    rand, queues = hf_rand(draws, NUM_POINTS)
    with monkeypatch.context() as m:
        m.setattr(torch, 'rand', rand)
        float64_safe_sdpa(m)
        r.hf_out = hf(pixel_values=x, mask_labels=[t['masks'].double() for t in targets],
                      class_labels=[t['labels'] for t in targets])
    assert not any(ours.draws.queues.values()) and not any(queues.values())  # all used
    r.ours_preds = ours_preds
    return r


def test_training_float64_matches_predictions_matches_and_losses(float64_step):
    r = float64_step
    K = r.hf.config.num_blocks
    assert len(r.hf_preds) == len(r.ours_preds) == K + 1
    mask, cls = max_diffs(dict(mask_logits=[m for m, _ in r.ours_preds],
                               class_logits=[c for _, c in r.ours_preds]),
                          [m for m, _ in r.hf_preds], [c for _, c in r.hf_preds])
    assert mask <= 1e-10 and cls <= 1e-10

    as_lists = [[(i.tolist(), j.tolist()) for i, j in call] for call in r.hf_matches]
    assert as_lists == [[(i.tolist(), j.tolist()) for i, j in call] for call in r.ours_matches]
    assert len(as_lists) == K + 1

    names = {'loss_cross_entropy': 'loss_cls', 'loss_mask': 'loss_mask', 'loss_dice': 'loss_dice'}
    worst = worst_abs = 0.0
    for b, hf_losses in enumerate(r.hf_losses):  # already weighted by HF (2, 5, 5)
        tag = '' if b == K else f'b{b}.'
        for hf_name, name in names.items():
            a, ref = r.losses[tag + name], hf_losses[hf_name]
            torch.testing.assert_close(a, ref, rtol=1e-10, atol=0)
            worst = max(worst, ((a - ref).abs() / ref.abs()).item())
            worst_abs = max(worst_abs, (a - ref).abs().item())
    assert len(r.losses) == 3 * (K + 1)
    total = sum(r.losses.values())
    torch.testing.assert_close(total, r.hf_out.loss, rtol=1e-10, atol=0)
    print(f'{r.size} float64 training: max |mask - HF| {mask:.1e}, class {cls:.1e}; max relative '
          f'loss difference {worst:.1e} (absolute {worst_abs:.1e}); total {total.item():.6f} vs HF {r.hf_out.loss.item():.6f}')

    # the per-query draw matters: every query unmasked instead changes the final masks
    r.ours.draws = GivenDraws(dict(r.draws, query_unmask=[torch.ones_like(d) for d in
                                                          r.draws['query_unmask']]))
    with torch.no_grad():
        unmasked = r.ours.predictions(r.x, masked=True)[0][-1]
    assert (unmasked - r.hf_preds[-1][0]).abs().max() > 1e-3


def test_training_float64_gradients_match(float64_step):
    r = float64_step
    sum(r.losses.values()).backward()
    r.hf_out.loss.backward()
    # HF's position table has no class-token row (a zero one here)
    worst, n = compare_gradients(r.ours, r.hf, convert_eomt,
                                 trim={'backbone.pos_embed.weight': lambda g: g[:, 1:]})
    print(f'{r.size} gradients: max relative difference {worst:.1e} over {n} tensors')


# ---------------------------------------------------------------- loading through the tools

# the test data of tests/configs/tiny_segformer_shapes.py: five 48 x 48 shapes images
TINY_DATA = """
data_root = '{root}/'
tiny_shapes = dict(img_size=(48, 48), max_objects=2, min_size=10, max_size=24)
test_pipeline = [dict(type='LoadImage'), dict(type='Resize', scale=(48, 48), keep_ratio=True),
                 dict(type='LoadSegAnnotations'), dict(type='PackSegInputs')]
test_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, generate=dict(tiny_shapes, num_images=5, seed=1),
                 pipeline=test_pipeline))
"""


def tiny_config(tmp_path, hf, extra=''):
    """configs/eomt's recipe with the HF file's sizes (for init_model / tools/test.py)."""
    cfg = densevit_cfg(hf)
    b, head = cfg['backbone'], cfg['decode_head']
    path = tmp_path / 'tiny_eomt.py'
    path.write_text(
        f"_base_ = ['{CONFIG}']\n"
        f"model = dict(num_queries={cfg['num_queries']}, num_blocks={cfg['num_blocks']},\n"
        f"    backbone=dict(arch={b['arch']!r}, img_size={b['img_size']}, "
        f"patch_size={b['patch_size']}, num_register_tokens={b['num_register_tokens']}, "
        f"layer_scale_init_value=1.0, ffn_type={b['ffn_type']!r}),\n"
        f"    data_preprocessor=dict(size_divisor={b['patch_size']}, "
        f"patch_size={b['patch_size']}),\n"
        f"    decode_head=dict(num_classes={head['num_classes']}, "
        f"num_upscale_blocks={head['num_upscale_blocks']}))\n" + extra)
    return path


def test_init_model_loads_the_hf_file_whole(hf_file, tmp_path):
    size, hf, path = hf_file
    hf = copy.deepcopy(hf)
    set_probs(hf, [0.0] * hf.config.num_blocks)
    model = init_model(str(tiny_config(tmp_path, hf)), str(path))
    x = images(hf)
    with torch.no_grad():
        out = model(x, mode='tensor')
        ref = hf(pixel_values=x)
    assert (out['mask_logits'][-1] - ref.masks_queries_logits).abs().max() <= 1e-4
    assert (out['class_logits'][-1] - ref.class_queries_logits).abs().max() <= 1e-4


def test_tools_test_py_loads_the_hf_file(tmp_path):
    """An HF file of the shapes' four classes at their 48-pixel size, through tools/test.py
    on the tiny shapes data: loaded whole (strict), evaluated."""
    cfg = transformers.EomtConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=48, patch_size=8, num_register_tokens=1,
                                  num_blocks=1, num_queries=4, num_labels=4)
    hf = transformers.EomtForUniversalSegmentation(cfg)
    randomize_(hf, seed=2, embedding_scale=1.0)
    hf.save_pretrained(tmp_path / 'hf')
    config = tiny_config(tmp_path, hf, extra=TINY_DATA.format(root=tmp_path / 'shapes_seg'))
    with isolated():
        rc = load_tool('tools/test.py').main(
            [str(config), str(tmp_path / 'hf' / 'model.safetensors'), '--work-dir',
             str(tmp_path / 'test'), '--cfg-options', *unique_names()])
    assert rc == 0
    assert list((tmp_path / 'test').glob('*/*.json'))
