"""densevit's Conditional DETR equals HF transformers' ``ConditionalDetrForObjectDetection``
(the reference) with the weights of an HF file converted on load: tiny sizes, every HF
tensor random, a padded batch of two image sizes.

- eval: logits and boxes within 1e-4 (float32);
- training, float64, dropout 0: the Hungarian matches of every decoder layer, every
  layer's losses and every parameter's gradient equal HF's;
- the file loads whole through ``init_model`` with a tiny version of the COCO config, and
  into another DETR variant's config it is refused naming both.

HF with ``auxiliary_loss=True`` feeds each layer's *normalised* output to the next layer
(its decoder reassigns the LayerNorm's output), which the paper's code does not; its
``auxiliary_loss=False`` forward is the paper's. So HF runs with ``auxiliary_loss=False``
(the Hub files' setting) and the auxiliary layers' predictions are made from its per-layer
hidden states with its own LayerNorm, classifier and box head, exactly as its forward makes
the last layer's, then scored by its own loss function.
"""
import copy

import pytest
import torch

from densevit.checkpoint.conditional_detr import convert_conditional_detr

import hf_detr_family as family

transformers = pytest.importorskip('transformers')
from transformers.models.conditional_detr import modeling_conditional_detr as hf_cd  # noqa: E402

L = family.SIZES['layers']
WEIGHTS = dict(loss_cls=2.0, loss_bbox=5.0, loss_iou=2.0)  # the paper's (the head's default)
RECIPE = 'conditional_detr/conditional_detr_r50_8xb2-50e_coco.py'
LAYOUT, HEAD = 'Hugging Face Conditional DETR', 'ConditionalDETRHead'


@pytest.fixture(scope='module')
def hf_file(tmp_path_factory):
    cfg = transformers.ConditionalDetrConfig(d_model=family.SIZES['d_model'],
                                             **family.hf_kwargs(transformers))
    model = transformers.ConditionalDetrForObjectDetection(cfg)
    wide = [model.model.query_position_embeddings.weight, model.class_labels_classifier.weight,
            model.bbox_predictor.layers[-1].weight]
    for layer in model.model.decoder.layers:
        attn = layer.encoder_attn
        wide += [attn.q_content_proj.weight, attn.k_content_proj.weight,
                 attn.q_pos_sine_proj.weight, attn.k_pos_proj.weight]
    # saved in the Hub layout: sa_qcontent_proj, ca_qpos_sine_proj ...
    return family.saved_hf_file(model, 3, wide, tmp_path_factory)


def test_eval_outputs_match_hf(hf_file):
    hf, path = hf_file
    ours = family.loaded(path, LAYOUT, HEAD)
    x, pixel_mask, samples = family.padded_batch()
    with torch.no_grad():
        ref = hf(pixel_values=x, pixel_mask=pixel_mask)
        out = ours(x, samples, mode='tensor')
        unmasked = hf(pixel_values=x)
    family.assert_eval_outputs_match(ref, out, unmasked)


def _hf_losses(hf, x, pixel_mask, labels):
    """HF's forward with labels (the last layer's losses), and its loss function over every
    layer's predictions made by HF's own modules (see the module docstring)."""
    out = hf(pixel_values=x, pixel_mask=pixel_mask, labels=labels, output_hidden_states=True)
    states = out.decoder_hidden_states  # zeros, layer outputs before the LayerNorm ..., last
    hs = [hf.model.decoder.layernorm(h) for h in states[1:L]] + [out.last_hidden_state]
    reference = hf.model.decoder.ref_point_head(hf.model.query_position_embeddings.weight)
    logits, boxes = [], []
    for h in hs:
        logits.append(hf.class_labels_classifier(h))
        delta = hf.bbox_predictor(h)
        delta[..., :2] += hf_cd.inverse_sigmoid(reference.sigmoid())
        boxes.append(delta.sigmoid())
    torch.testing.assert_close(logits[-1], out.logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(boxes[-1], out.pred_boxes, rtol=0, atol=1e-12)
    config = copy.deepcopy(hf.config)
    config.auxiliary_loss = True
    _, loss_dict, _ = hf.loss_function(out.logits, labels, x.device, out.pred_boxes, config,
                                       torch.stack(logits), torch.stack(boxes))
    return out.loss_dict, loss_dict


def _float64_position_encoding(head, hf):
    """Swap in HF's image position encoding, which follows the input's dtype (float64
    here); densevit's, like the paper's code, computes it in float32."""
    pe = hf.model.position_embedding
    head.positional_encoding.forward = lambda mask: pe(
        shape=(mask.shape[0], 1, *mask.shape[1:]), device=mask.device, dtype=torch.float64,
        mask=~mask)


@pytest.mark.parametrize('encoding,rtol', [('own', 1e-6), ('float64', 1e-10)])
def test_training_float64_matches_losses_and_gradients(hf_file, monkeypatch, encoding, rtol):
    """With densevit's own float32 image encoding the losses and gradients agree to
    ~1e-7 relative; with HF's float64 encoding swapped in, to ~1e-12: the rest is exact."""
    t = family.float64_training(*hf_file, LAYOUT, HEAD, monkeypatch)
    if encoding == 'float64':
        _float64_position_encoding(t.head, t.hf)

    losses = t.ours(t.x, t.samples, mode='loss')
    labels = family.hf_labels(t.head, t.samples, torch.float64)
    last, ref = _hf_losses(t.hf, t.x, t.pixel_mask, labels)

    # matches: HF's forward matched the last layer once, then its loss over all layers
    family.assert_same_matches(t.hf_matches[1:], t.ours_matches.calls)
    assert t.hf_matches[0] == t.ours_matches.calls[-1]
    for k in ('loss_ce', 'loss_bbox', 'loss_giou'):
        torch.testing.assert_close(last[k], ref[k], rtol=0, atol=0)
    loss_diff = family.compare_losses(losses, ref, WEIGHTS, L, rtol=rtol / 10)

    sum(losses.values()).backward()
    family.weighted_total(ref, WEIGHTS, L).backward()
    grad_rel, grad_abs = family.compare_grads(t.ours, t.hf, convert_conditional_detr, rtol=rtol)
    print(f'{encoding}: max relative loss diff {loss_diff:.2e}, gradients: max relative diff '
          f'{grad_rel:.2e}, max absolute diff {grad_abs:.2e}')


def test_init_model_loads_the_hf_file_whole(hf_file, tmp_path):
    family.assert_init_model_loads_whole(*hf_file, tmp_path, RECIPE, HEAD)


@pytest.mark.parametrize('recipe,head', [
    ('dab_detr/dab_detr_r50_8xb2-50e_coco.py', 'DABDETRHead'),
    ('detr_resnet50.py', 'DETRHead')])
def test_another_detr_variant_is_refused_naming_both(hf_file, tmp_path, recipe, head):
    family.assert_refused(hf_file[1], tmp_path, recipe, head, LAYOUT)
