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
import pytest
import torch

from densevit.checkpoint.dab_detr import convert_dab_detr
from densevit.checkpoint.read import read_checkpoint

import hf_detr_family as family

transformers = pytest.importorskip('transformers')

L = family.SIZES['layers']
WEIGHTS = dict(loss_cls=1.0, loss_bbox=5.0, loss_iou=2.0)  # the paper's (the head's default)
RECIPE = 'dab_detr/dab_detr_r50_8xb2-50e_coco.py'
LAYOUT, HEAD = 'Hugging Face DAB-DETR', 'DABDETRHead'


@pytest.fixture(scope='module')
def hf_file(tmp_path_factory):
    cfg = transformers.DabDetrConfig(hidden_size=family.SIZES['d_model'], auxiliary_loss=True,
                                     **family.hf_kwargs(transformers))
    model = transformers.DabDetrForObjectDetection(cfg)
    wide = [model.model.query_refpoint_embeddings.weight, model.class_embed.weight,
            model.bbox_predictor.layers[-1].weight]
    for layer in model.model.decoder.layers:
        attn = layer.cross_attn
        wide += [attn.cross_attn_query_content_proj.weight, attn.cross_attn_key_content_proj.weight,
                 attn.cross_attn_query_pos_sine_proj.weight, attn.cross_attn_key_pos_proj.weight]
    model, path = family.saved_hf_file(model, 5, wide, tmp_path_factory)
    # bbox_predictor once (the decoder's copy is tied to it)
    assert not any(k.startswith('model.decoder.bbox_embed') for k in read_checkpoint(path))
    return model, path


def test_eval_outputs_match_hf(hf_file):
    hf, path = hf_file
    ours = family.loaded(path, LAYOUT, HEAD)
    x, pixel_mask, samples = family.padded_batch()
    with torch.no_grad():  # with labels, HF returns its auxiliary layers' outputs too
        ref = hf(pixel_values=x, pixel_mask=pixel_mask,
                 labels=family.hf_labels(ours.bbox_head, samples, torch.float32))
        out = ours(x, samples, mode='tensor')
        unmasked = hf(pixel_values=x)
    family.assert_eval_outputs_match(ref, out, unmasked)
    assert len(ref.auxiliary_outputs) == L - 1
    for i, aux in enumerate(ref.auxiliary_outputs):
        assert (out['pred_logits'][i] - aux['logits']).abs().max() <= 1e-4
        assert (out['pred_boxes'][i] - aux['pred_boxes']).abs().max() <= 1e-4


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
    t = family.float64_training(*hf_file, LAYOUT, HEAD, monkeypatch)
    if softmax == 'float64':
        _float64_softmax(monkeypatch)

    losses = t.ours(t.x, t.samples, mode='loss')
    with family.default_dtype(torch.float64):  # HF makes its zero queries in the default dtype
        out = t.hf(pixel_values=t.x, pixel_mask=t.pixel_mask,
                   labels=family.hf_labels(t.head, t.samples, torch.float64))

    family.assert_same_matches(t.hf_matches, t.ours_matches.calls)
    loss_diff = family.compare_losses(losses, out.loss_dict, WEIGHTS, L, rtol=rtol / 10)
    total = sum(losses.values())
    # HF's own total weighs the classification 1, as the paper: the same as ours
    torch.testing.assert_close(total, out.loss, rtol=rtol / 10, atol=0)
    torch.testing.assert_close(out.loss, family.weighted_total(out.loss_dict, WEIGHTS, L))

    total.backward()
    out.loss.backward()
    grad_rel, grad_abs = family.compare_grads(t.ours, t.hf, convert_dab_detr, rtol=rtol, atol=atol)
    print(f'{softmax} softmax: max relative loss diff {loss_diff:.2e}, gradients: max relative '
          f'diff {grad_rel:.2e}, max absolute diff {grad_abs:.2e}')


def test_init_model_loads_the_hf_file_whole(hf_file, tmp_path):
    family.assert_init_model_loads_whole(*hf_file, tmp_path, RECIPE, HEAD)


def test_another_detr_variant_is_refused_naming_both(hf_file, tmp_path):
    family.assert_refused(hf_file[1], tmp_path,
                          'conditional_detr/conditional_detr_r50_8xb2-50e_coco.py',
                          'ConditionalDETRHead', LAYOUT)
