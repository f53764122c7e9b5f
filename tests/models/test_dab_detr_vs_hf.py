"""densevit's DAB-DETR equals HF transformers' ``DabDetrForObjectDetection`` (the reference)
with the weights of an HF file converted on load: tiny sizes, every HF tensor random
(anchors and cross-attention projections from N(0, 1)), a padded batch of two image sizes.

- eval: logits and boxes within 1e-4 (float32);
- training, float64, dropout 0, auxiliary losses on (HF's ``auxiliary_loss=True``): the
  Hungarian matches of every decoder layer, every layer's losses, the total loss HF
  returns and every parameter's gradient (the shared box head's included: HF ties the
  decoder's anchor refinement to ``bbox_predictor``) equal HF's;
- the file loads whole through ``init_model`` with a tiny version of the COCO config, and
  into Conditional DETR's config it is refused naming both.
"""
import copy

import pytest
import torch

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.dab_detr import convert_dab_detr
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.read import read_checkpoint

from hf_detr_family import (
    SIZES,
    MatchRecorder,
    build_ours,
    compare_grads,
    compare_losses,
    default_dtype,
    hf_kwargs,
    hf_labels,
    padded_batch,
    per_layer,
    randomized,
    record_hf_matches,
    tiny_config,
    weighted_total,
)

transformers = pytest.importorskip('transformers')

L = SIZES['layers']
WEIGHTS = dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0)  # the paper's (the head's default)
RECIPE = 'dab_detr/dab_detr_r50_8xb2-50e_coco.py'


@pytest.fixture(scope='module')
def hf_file(tmp_path_factory):
    cfg = transformers.DabDetrConfig(hidden_size=SIZES['d_model'], auxiliary_loss=True,
                                     **hf_kwargs(transformers))
    model = transformers.DabDetrForObjectDetection(cfg)
    wide = [model.model.query_refpoint_embeddings.weight, model.class_embed.weight,
            model.bbox_predictor.layers[-1].weight]
    for layer in model.model.decoder.layers:
        attn = layer.cross_attn
        wide += [attn.cross_attn_query_content_proj.weight, attn.cross_attn_key_content_proj.weight,
                 attn.cross_attn_query_pos_sine_proj.weight, attn.cross_attn_key_pos_proj.weight]
    model = randomized(model, seed=5, wide=wide)
    path = tmp_path_factory.mktemp('hf_dab_detr')
    model.save_pretrained(path)  # bbox_predictor once (the decoder's copy is tied to it)
    return model, path / 'model.safetensors'


def _loaded(path):
    sd = read_checkpoint(path)
    assert not any(k.startswith('model.decoder.bbox_embed') for k in sd)
    sd = convert_model(sd, strict=True)
    assert sd.layout == 'Hugging Face DAB-DETR'
    ours = build_ours('DABDETRHead')
    ours.load_state_dict(sd, strict=True)
    return ours


def test_eval_outputs_match_hf(hf_file):
    hf, path = hf_file
    ours = _loaded(path)
    x, pixel_mask, samples = padded_batch()
    with torch.no_grad():  # with labels, HF returns its auxiliary layers' outputs too
        ref = hf(pixel_values=x, pixel_mask=pixel_mask,
                 labels=hf_labels(ours.bbox_head, samples, torch.float32))
        out = ours(x, samples, mode='tensor')
        unmasked = hf(pixel_values=x)
    # the queries differ (by 10x the tolerance at least), so a mix-up of query rows would show
    assert ref.logits.std(dim=1).min() > 1e-2 and ref.pred_boxes.std(dim=1).min() > 1e-3
    assert (out['pred_logits'][-1] - ref.logits).abs().max() <= 1e-4
    assert (out['pred_boxes'][-1] - ref.pred_boxes).abs().max() <= 1e-4
    assert len(ref.auxiliary_outputs) == L - 1
    for i, aux in enumerate(ref.auxiliary_outputs):
        assert (out['pred_logits'][i] - aux['logits']).abs().max() <= 1e-4
        assert (out['pred_boxes'][i] - aux['pred_boxes']).abs().max() <= 1e-4
    assert (unmasked.logits[1] - ref.logits[1]).abs().max() > 1e-3  # the padding mask matters


def _float64_softmax(monkeypatch):
    """HF's DAB-DETR attention takes its softmax in float32 whatever the model's dtype
    (``softmax(..., dtype=torch.float32)``): drop that cast, so that it runs in float64."""
    softmax = torch.nn.functional.softmax
    monkeypatch.setattr(torch.nn.functional, 'softmax',
                        lambda x, dim=None, dtype=None, **kwargs: softmax(x, dim=dim))


# HF as it is: its float32 softmax leaves ~1e-7 relative differences (and ~1e-6 absolute noise
# on gradients); in float64 throughout, ~1e-11
@pytest.mark.parametrize('softmax,rtol,atol', [('float32', 1e-6, 1e-5), ('float64', 1e-10, 1e-12)])
def test_training_float64_matches_losses_and_gradients(hf_file, monkeypatch, softmax, rtol, atol):
    hf, path = hf_file
    hf = copy.deepcopy(hf).double().train()
    for p in hf.parameters():
        p.requires_grad_(True)
    ours = _loaded(path).double().train()
    head = ours.bbox_head
    head.criterion.matcher = ours_matches = MatchRecorder(head.criterion.matcher)
    hf_matches = record_hf_matches(monkeypatch)
    x, pixel_mask, samples = padded_batch(torch.float64)
    if softmax == 'float64':
        _float64_softmax(monkeypatch)

    losses = ours(x, samples, mode='loss')
    with default_dtype(torch.float64):  # HF makes its zero queries in the default dtype
        out = hf(pixel_values=x, pixel_mask=pixel_mask,
                 labels=hf_labels(head, samples, torch.float64))

    assert per_layer(hf_matches, L) == ours_matches.calls
    assert all(len(i) == n for calls in ours_matches.calls
               for (i, _), n in zip(calls, (3, 2), strict=True))
    loss_diff = compare_losses(losses, out.loss_dict, WEIGHTS, L, rtol=rtol / 10)
    total = sum(losses.values())
    # HF's own total weighs the classification 1, as the paper: the same as ours
    torch.testing.assert_close(total, out.loss, rtol=rtol / 10, atol=0)
    torch.testing.assert_close(out.loss, weighted_total(out.loss_dict, WEIGHTS, L))

    total.backward()
    out.loss.backward()
    grad_rel, grad_abs = compare_grads(ours, hf, convert_dab_detr, rtol=rtol, atol=atol)
    print(f'{softmax} softmax: max relative loss diff {loss_diff:.2e}, gradients: max relative '
          f'diff {grad_rel:.2e}, max absolute diff {grad_abs:.2e}')


def test_init_model_loads_the_hf_file_whole(hf_file, tmp_path):
    hf, path = hf_file
    model = init_model(tiny_config(tmp_path, RECIPE, 'DABDETRHead'), str(path))
    x, pixel_mask, samples = padded_batch()
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
        ref = hf(pixel_values=x, pixel_mask=pixel_mask)
    assert (out['pred_boxes'][-1] - ref.pred_boxes).abs().max() <= 1e-4


def test_another_detr_variant_is_refused_naming_both(hf_file, tmp_path):
    _, path = hf_file
    config = tiny_config(tmp_path, 'conditional_detr/conditional_detr_r50_8xb2-50e_coco.py',
                         'ConditionalDETRHead')
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(config, str(path))
    message = str(e.value)
    assert 'Hugging Face DAB-DETR checkpoint' in message
    assert 'the config builds DETR(ResNet, ConditionalDETRHead)' in message
