"""densevit's Mask2Former equals HF transformers' ``Mask2FormerForUniversalSegmentation`` (the
reference) on a Swin backbone, with the weights of an HF file (``save_pretrained``'s
``model.safetensors``, every saved tensor re-drawn by ``randomize_``) converted on load
(``densevit/checkpoint/mask2former.py``), at two tiny sizes (``d32``: pixel decoder, decoder
and mask features all 32 wide, 2 decoder layers; ``proj``: a 48-wide decoder with its input
projections, 16-wide mask features, 3 decoder layers over the three levels, 4 heads):

- the file converts strictly: every key renamed or dropped on purpose, none missing; without
  the decoder's input projections (as transformers 5.17 saves a model that has them) it is
  refused;
- eval, at 64 x 64 and 70 x 99: every layer's class and mask logits within 1e-4, and the
  masked attention matters (without it the final masks differ);
- training in float64 with every random draw (the matcher's points, the loss's oversampled
  and random points) made once here and given to both, each side in its own order (HF scores
  the final set first): every layer's predictions, the Hungarian matches, every layer's class
  / mask / dice losses, the total and every parameter's gradient equal HF's;
- the file loads whole through ``init_model`` (configs/mask2former's recipe with the file's
  Swin and sizes).

HF keeps its loss's class weights ``criterion.empty_weight`` in the file (re-drawn like the
rest; put back to ones and the no-object weight 0.1 for the loss comparison; densevit's
converter drops them).
"""
import copy
from types import SimpleNamespace

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.mask2former import (
    HF_MASK2FORMER_SWIN,
    convert_mask2former,
    hf_model_cfg,
)
from densevit.checkpoint.read import read_checkpoint
from densevit.models.heads import mask2former_head
from densevit.models.segmentors.mask_targets import mask_targets
from densevit.registry import MODELS
from densevit.structures import DataSample

from hf_mask_classifiers import (
    GivenDraws,
    compare_gradients,
    hf_rand,
    max_diffs,
    recorded,
    saved_random_model,
)
from tiny_run import REPO

transformers = pytest.importorskip('transformers')

NUM_POINTS = 20  # matching and loss points; oversampled 60, uncertain 15, random 5
NAMES = ('match_points', 'oversampled_points', 'random_points')
SWIN = dict(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 2, 1],
            num_heads=[1, 1, 2, 2], window_size=4, mlp_ratio=2.0, drop_path_rate=0.0,
            out_features=['stage1', 'stage2', 'stage3', 'stage4'])
SIZES = {
    'd32': dict(feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_layers=2,
                encoder_feedforward_dim=48, decoder_layers=3, dim_feedforward=48,
                num_attention_heads=2, num_queries=5, num_labels=3),
    'proj': dict(feature_size=32, mask_feature_size=16, hidden_dim=48, encoder_layers=1,
                 encoder_feedforward_dim=40, decoder_layers=4, dim_feedforward=64,
                 num_attention_heads=4, num_queries=6, num_labels=4),
}
IMAGE_SIZES = [(64, 64), (70, 99)]
CONFIG = REPO / 'configs' / 'mask2former' / 'mask2former_vit_shapes_panoptic.py'


def hf_config(size):
    return transformers.Mask2FormerConfig(
        backbone_config=transformers.SwinConfig(**SWIN), dropout=0.0,
        train_num_points=NUM_POINTS, **SIZES[size])


def densevit_parts(c):
    """densevit's backbone, pixel decoder and decode head for the HF config ``c``."""
    return {k: v for k, v in hf_model_cfg(c).items() if k != 'type'}


def hf_model(config):
    """HF's model for ``config`` with its decoder's input projections registered, as 5.24 has
    them: transformers 5.17 keeps them in a plain list, which ``randomize_`` does not re-draw,
    ``double()`` does not cast and ``save_pretrained`` does not save."""
    model = transformers.Mask2FormerForUniversalSegmentation(config)
    module = model.model.transformer_module
    module.input_projections = torch.nn.ModuleList(module.input_projections)
    return model


@pytest.fixture(scope='module', params=list(SIZES))
def hf_file(request, tmp_path_factory):
    """(size, HF model in eval mode with every saved tensor random, its model.safetensors)."""
    model, path = saved_random_model(hf_model, hf_config(request.param),
                                     tmp_path_factory.mktemp(f'hf_mask2former_{request.param}'))
    return request.param, model, path


def loaded(hf, path):
    """densevit's Mask2Former built for ``hf`` with the file at ``path`` converted (strictly)."""
    sd = convert_model(read_checkpoint(path), strict=True)
    assert sd.layout == HF_MASK2FORMER_SWIN.name and sd.options == dict(always_shift=True)
    with DefaultScope.overwrite_default_scope('densevit'):
        ours = MODELS.build(dict(type='Mask2Former', **densevit_parts(hf.config)))
    ours.load_state_dict(sd, strict=True)
    return ours.eval()


def images(size, dtype=torch.float32):
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0), dtype=dtype)


def hf_sets(out):
    """HF's prediction sets in order (auxiliary ones first, the final last): (masks, classes)."""
    aux = out.auxiliary_logits
    return ([a['masks_queries_logits'] for a in aux] + [out.masks_queries_logits],
            [a['class_queries_logits'] for a in aux] + [out.class_queries_logits])


def test_the_file_converts_strictly(hf_file):
    size, hf, path = hf_file
    state = read_checkpoint(path)
    sd = convert_model(state, strict=True)
    with DefaultScope.overwrite_default_scope('densevit'):
        ours = MODELS.build(dict(type='Mask2Former', **densevit_parts(hf.config)))
    expected = ours.state_dict()
    assert set(sd) == set(expected)
    assert all(sd[k].shape == expected[k].shape for k in sd)
    dropped = {k for k in state if HF_MASK2FORMER_SWIN.rename(k) == (None, True)}
    assert dropped == {'criterion.empty_weight',
                       'model.pixel_level_module.encoder.swin.layernorm.weight',
                       'model.pixel_level_module.encoder.swin.layernorm.bias'}


def test_a_file_without_its_input_projections_is_refused(hf_file):
    """As transformers 5.17 saves a model that projects: no input projections in the file."""
    size, hf, path = hf_file
    state = {k: v for k, v in read_checkpoint(path).items()
             if not k.startswith('model.transformer_module.input_projections.')}
    if size == 'd32':  # nothing to project: the same file in every version
        assert len(convert_model(state, strict=True)) == len(convert_model(read_checkpoint(path)))
        return
    with pytest.raises(ValueError, match=r'projects the 32-wide memory to 48 channels'):
        convert_model(state, strict=True)


def no_masking(mask_logits, size, num_heads):
    """An attention mask that masks nothing (to show that the masks matter)."""
    B, Q = mask_logits.shape[:2]
    return torch.zeros(B * num_heads, Q, size[0] * size[1], dtype=torch.bool)


@pytest.mark.parametrize('image_size', IMAGE_SIZES, ids=lambda s: f'{s[0]}x{s[1]}')
def test_eval_every_layer_matches_hf(hf_file, image_size, monkeypatch):
    size, hf, path = hf_file
    ours = loaded(hf, path)
    x = images(image_size)
    with torch.no_grad():
        ref = hf(pixel_values=x, output_auxiliary_logits=True)
        out = ours(x, mode='tensor')
    hf_masks, hf_classes = hf_sets(ref)
    assert len(out['mask_logits']) == hf.config.decoder_layers
    # the queries predict different things: a mix-up of query rows would show
    assert ref.class_queries_logits.std(dim=1).min() > 1e-2
    assert ref.masks_queries_logits.std(dim=1).min() > 1e-2
    mask, cls = max_diffs(out, hf_masks, hf_classes)
    print(f'{size} eval {image_size}: max |mask logits - HF| {mask:.2e}, class logits {cls:.2e}')
    assert mask <= 1e-4 and cls <= 1e-4
    monkeypatch.setattr(mask2former_head, 'masked_attention_mask', no_masking)
    with torch.no_grad():
        unmasked = ours(x, mode='tensor')['mask_logits'][-1]
    assert (unmasked - out['mask_logits'][-1]).abs().max() > 1e-2  # the masks matter


# ---------------------------------------------------------------- training, float64

def label_maps(hf, s):
    """Two label maps of s x s: a few rectangles of classes 0..K-1 over class 1 (or 2), and a
    band of ignored pixels (255) in the first."""
    K = hf.config.num_labels
    a = torch.ones(s, s, dtype=torch.long)
    a[: s // 2, : s // 3] = 0
    a[s // 3:, s // 2:] = K - 1
    a[-3:, :] = 255
    b = torch.full((s, s), 2 % K, dtype=torch.long)
    b[s // 4: 3 * s // 4, s // 8: s // 2] = 0
    return [a, b]


def make_draws(hf, targets):
    """Every random draw of one training step, per prediction set, by name, made once."""
    g = torch.Generator().manual_seed(5)
    Q, B = hf.config.num_queries, len(targets)
    M = sum(min(Q, len(t['labels'])) for t in targets)  # matched pairs per prediction set

    def u(*shape):
        return torch.rand(shape, generator=g, dtype=torch.float64)
    return [dict(match_points=[u(NUM_POINTS, 2) for _ in range(B)],
                 oversampled_points=[u(M, 3 * NUM_POINTS, 2)],
                 random_points=[u(M, NUM_POINTS - int(0.75 * NUM_POINTS), 2)])
            for _ in range(hf.config.decoder_layers)]


def in_order(per_set, order):
    """The draws of the prediction sets in ``order``, one queue per name."""
    return {name: [d for s in order for d in per_set[s][name]] for name in NAMES}


@pytest.fixture
def float64_step(hf_file, monkeypatch):
    """One training step of both models in float64 with the same draws, everything recorded."""
    size, hf, path = hf_file
    hf = copy.deepcopy(hf).double().train()
    with torch.no_grad():  # HF's loss weights: ones, the no-object weight last
        hf.criterion.empty_weight.fill_(1.0)
        hf.criterion.empty_weight[-1] = hf.config.no_object_weight
    ours = loaded(hf, path).double().train()
    x = images((64, 64), torch.float64)
    samples = [DataSample(gt_sem_seg=PixelData(data=lab[None]),
                          metainfo=dict(img_shape=tuple(lab.shape))) for lab in label_maps(hf, 64)]
    targets = mask_targets(samples, x.shape[-2:], x.device, hf.config.num_labels)
    per_set = make_draws(hf, targets)
    L = len(per_set) - 1  # the final set's index; HF scores it first, then 0..L-1

    r = SimpleNamespace(size=size, hf=hf, ours=ours, hf_losses=[], hf_matches=[],
                        ours_matches=[], ours_preds=[], num_sets=L + 1)
    hf.get_loss_dict = recorded(r.hf_losses, hf.get_loss_dict)
    hf.criterion.matcher.forward = recorded(r.hf_matches, hf.criterion.matcher.forward)
    matcher = ours.decode_head.criterion.matcher
    ours.decode_head.criterion.matcher = recorded(r.ours_matches, matcher)
    ours.draws = GivenDraws(in_order(per_set, range(L + 1)))
    ours.decode_head.forward = recorded(r.ours_preds, ours.decode_head.forward)

    r.losses = ours.loss(x, samples)
    rand, queues = hf_rand(in_order(per_set, [L, *range(L)]), NUM_POINTS)
    with monkeypatch.context() as m:
        m.setattr(torch, 'rand', rand)
        r.hf_out = hf(pixel_values=x, mask_labels=[t['masks'].double() for t in targets],
                      class_labels=[t['labels'] for t in targets], output_auxiliary_logits=True)
    assert not any(ours.draws.queues.values()) and not any(queues.values())  # all used
    r.hf_matches = r.hf_matches[1:] + r.hf_matches[:1]  # in densevit's order
    return r


def test_training_float64_matches_predictions_matches_and_losses(float64_step):
    r = float64_step
    (masks, classes), = r.ours_preds
    mask, cls = max_diffs(dict(mask_logits=masks, class_logits=classes), *hf_sets(r.hf_out))
    assert mask <= 1e-10 and cls <= 1e-10

    as_lists = [[(i.tolist(), j.tolist()) for i, j in call] for call in r.hf_matches]
    assert as_lists == [[(i.tolist(), j.tolist()) for i, j in call] for call in r.ours_matches]
    assert len(as_lists) == r.num_sets

    hf_losses, = r.hf_losses  # already weighted by HF (2, 5, 5)
    names = {'loss_cross_entropy': 'loss_cls', 'loss_mask': 'loss_mask', 'loss_dice': 'loss_dice'}
    worst = worst_abs = 0.0
    for s in range(r.num_sets):
        final = s == r.num_sets - 1
        for hf_name, name in names.items():
            a = r.losses[name if final else f'd{s}.{name}']
            ref = hf_losses[hf_name if final else f'{hf_name}_{s}']
            torch.testing.assert_close(a, ref, rtol=1e-10, atol=0)
            worst = max(worst, ((a - ref).abs() / ref.abs()).item())
            worst_abs = max(worst_abs, (a - ref).abs().item())
    assert len(r.losses) == len(hf_losses) == 3 * r.num_sets
    total = sum(r.losses.values())
    torch.testing.assert_close(total, r.hf_out.loss, rtol=1e-10, atol=0)
    print(f'{r.size} float64 training: max |mask - HF| {mask:.1e}, class {cls:.1e}; max relative '
          f'loss difference {worst:.1e} (absolute {worst_abs:.1e}); total {total.item():.6f} '
          f'vs HF {r.hf_out.loss.item():.6f}')


def test_training_float64_gradients_match(float64_step):
    r = float64_step
    sum(r.losses.values()).backward()
    r.hf_out.loss.backward()
    # tensors left out of the relative figure: zero but for rounding (a bias before a GroupNorm)
    worst, n = compare_gradients(r.ours, r.hf, convert_mask2former)
    print(f'{r.size} gradients: max relative difference {worst:.1e} over {n} tensors')


# ---------------------------------------------------------------- loading through init_model

def tiny_config(tmp_path, hf):
    """configs/mask2former's recipe with the HF file's Swin and sizes."""
    parts = densevit_parts(hf.config)
    path = tmp_path / 'tiny_mask2former.py'
    path.write_text(
        f"_base_ = ['{CONFIG}']\n"
        f"model = dict(neck=None, backbone=dict(_delete_=True, **{parts['backbone']!r}),\n"
        f"    pixel_decoder=dict(_delete_=True, **{parts['pixel_decoder']!r}),\n"
        f"    decode_head=dict(_delete_=True, **{parts['decode_head']!r}))\n")
    return path


def test_init_model_loads_the_hf_file_whole(hf_file, tmp_path):
    size, hf, path = hf_file
    model = init_model(str(tiny_config(tmp_path, hf)), str(path))
    x = images((64, 64))
    with torch.no_grad():
        out = model(x, mode='tensor')
        ref = hf(pixel_values=x)
    assert (out['mask_logits'][-1] - ref.masks_queries_logits).abs().max() <= 1e-4
    assert (out['class_logits'][-1] - ref.class_queries_logits).abs().max() <= 1e-4
