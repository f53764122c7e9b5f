"""Shared pieces of the Conditional DETR / DAB-DETR comparisons with HF transformers
(tests/models/test_conditional_detr_vs_hf.py, test_dab_detr_vs_hf.py): the tiny sizes, a
padded batch of two image sizes with boxes, densevit's tiny detector and config, the HF
file and its loading, the recorders of matched pairs and gradients, and the checks both
make. HF's models are the reference implementation."""
import contextlib
import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

from densevit.apis import init_model
from densevit.checkpoint.convert import convert_model
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.read import read_checkpoint
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.random_init import randomize_

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
SIZES = dict(d_model=32, heads=2, ffn=64, queries=10, classes=3, layers=2)
# HF names of the unweighted per-layer losses -> ours (weighted by the criterion)
LOSS_NAMES = {'loss_ce': 'loss_cls', 'loss_bbox': 'loss_bbox', 'loss_giou': 'loss_iou'}


def hf_kwargs(transformers):
    """Config kwargs both HF models share: an HF ResNet-50 layout with one block per stage
    (8 stem channels, 256 out) and the sizes of :data:`SIZES`, dropout 0."""
    s = SIZES
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
        layer_type='bottleneck', out_features=['stage4'])
    return dict(backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
                encoder_layers=s['layers'], decoder_layers=s['layers'],
                encoder_attention_heads=s['heads'], decoder_attention_heads=s['heads'],
                encoder_ffn_dim=s['ffn'], decoder_ffn_dim=s['ffn'], num_queries=s['queries'],
                num_labels=s['classes'], dropout=0., attention_dropout=0.,
                activation_dropout=0.)


def randomized(model, seed, wide=()):
    """Every saved tensor of ``model`` random (``randomize_``), and the tensors in ``wide``
    from N(0, 1): queries and cross-attention projections spread enough that the queries
    predict different things (a swap of query rows would then show). Eval mode."""
    randomize_(model, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for w in wide:
            w.copy_(torch.randn(w.shape, generator=g))
    return model.eval()


def saved_hf_file(model, seed, wide, tmp_path_factory):
    """``model`` :func:`randomized` and saved with ``save_pretrained`` (the Hub layout)
    -> (model, the path of its ``model.safetensors``)."""
    model = randomized(model, seed=seed, wide=wide)
    path = tmp_path_factory.mktemp(f'hf_{type(model).__name__}')
    model.save_pretrained(path)
    return model, path / 'model.safetensors'


def tiny_head_cfg(head_type, **kwargs):
    s = SIZES
    return dict(type=head_type, num_classes=s['classes'], embed_dims=s['d_model'],
                num_queries=s['queries'], **kwargs,
                transformer=dict(num_heads=s['heads'], num_encoder_layers=s['layers'],
                                 num_decoder_layers=s['layers'], feedforward_channels=s['ffn'],
                                 dropout=0.))


def build_ours(head_type, **head_kwargs):
    """densevit's ``DETR`` with the tiny ResNet (HF's layout above) and ``head_type``."""
    cfg = dict(type='DETR', backbone=dict(type='ResNet', depth=50, base_channels=8,
                                          stage_blocks=(1, 1, 1, 1), out_indices=(3,)),
               bbox_head=tiny_head_cfg(head_type, **head_kwargs))
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(cfg).eval()


def tiny_config(tmp_path, recipe, head_type):
    """A config file inheriting ``configs/<recipe>`` with the tiny sizes (for ``init_model``)."""
    s = SIZES
    path = tmp_path / f'tiny_{head_type}.py'
    path.write_text(
        f"_base_ = ['{CONFIGS / recipe}']\n"
        f"model = dict(backbone=dict(base_channels=8, stage_blocks=(1, 1, 1, 1)),\n"
        f"    bbox_head=dict(num_classes={s['classes']}, embed_dims={s['d_model']}, "
        f"num_queries={s['queries']},\n"
        f"        transformer=dict(num_heads={s['heads']}, num_encoder_layers={s['layers']}, "
        f"num_decoder_layers={s['layers']}, feedforward_channels={s['ffn']})))\n")
    return path


def loaded(path, layout, head_type):
    """:func:`build_ours` with ``head_type``, its weights the HF file at ``path`` converted
    (strictly) from ``layout``."""
    sd = convert_model(read_checkpoint(path), strict=True)
    assert sd.layout == layout
    ours = build_ours(head_type)
    ours.load_state_dict(sd, strict=True)
    return ours


def padded_batch(dtype=torch.float32):
    """Two images padded to 96 x 128; the second's content is 64 x 80 (its feature cells
    beyond 2 x 3 of 3 x 4 are padding). Both have ground-truth boxes (xyxy pixels).

    Returns:
        x [2, 3, 96, 128], pixel_mask [2, 96, 128] (1 = image, HF's convention), samples.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 96, 128, generator=g, dtype=dtype)
    pixel_mask = torch.ones(2, 96, 128, dtype=torch.long)
    pixel_mask[1, 64:], pixel_mask[1, :, 80:] = 0, 0
    x[1, :, 64:], x[1, :, :, 80:] = 0, 0
    gts = [([[4, 6, 60, 50], [70, 20, 120, 90], [30, 40, 45, 70]], [0, 2, 1]),
           ([[10, 5, 50, 40], [40, 30, 78, 62]], [1, 1])]
    samples = []
    for shape, (boxes, labels) in zip(((96, 128), (64, 80)), gts, strict=True):
        ds = DataSample(metainfo=dict(img_shape=shape, ori_shape=shape, scale_factor=(1., 1.)))
        ds.gt_instances = InstanceData(bboxes=torch.tensor(boxes, dtype=torch.float32),
                                       labels=torch.tensor(labels))
        samples.append(ds)
    return x, pixel_mask, samples


def hf_labels(head, samples, dtype):
    """HF's ``labels`` for the same targets densevit's head trains on (normalised cxcywh)."""
    return [dict(class_labels=t['labels'], boxes=t['boxes'].to(dtype))
            for t in head.get_targets(samples)]


class MatchRecorder:
    """Wraps a matcher (callable ``(outputs, targets) -> indices``) and keeps every result."""

    def __init__(self, matcher):
        self.matcher, self.calls = matcher, []

    def __call__(self, outputs, targets):
        indices = self.matcher(outputs, targets)
        self.calls.append([(i.tolist(), j.tolist()) for i, j in indices])
        return indices


def record_hf_matches(monkeypatch):
    """Record every assignment HF's focal-cost matcher returns (list of per-call results)."""
    from transformers.loss import loss_deformable_detr
    cls = loss_deformable_detr.DeformableDetrHungarianMatcher
    calls, forward = [], cls.forward

    def recorded(self, outputs, targets):
        indices = forward(self, outputs, targets)
        calls.append([(i.tolist(), j.tolist()) for i, j in indices])
        return indices

    monkeypatch.setattr(cls, 'forward', recorded)
    return calls


def per_layer(hf_calls, num_layers):
    """HF matches the last layer first, then the auxiliary ones in order -> by layer."""
    return hf_calls[1:num_layers] + hf_calls[:1]


def compare_losses(ours, hf, weights, num_layers, rtol):
    """ours: densevit's weighted losses; hf: HF's unweighted ``loss_dict`` (suffix ``_i``
    for layer i < L-1) -> the largest relative difference over every loss of every layer
    (asserted at most ``rtol``)."""
    worst = 0.0
    for i in range(num_layers):
        ours_tag, hf_tag = ('', '') if i == num_layers - 1 else (f'd{i}.', f'_{i}')
        for hf_name, name in LOSS_NAMES.items():
            a, b = ours[ours_tag + name] / weights[name], hf[hf_name + hf_tag]
            torch.testing.assert_close(a, b.to(a.dtype), rtol=rtol, atol=0)
            worst = max(worst, ((a - b).abs() / b.abs()).item())
    assert len(ours) == 3 * num_layers
    return worst


def weighted_total(hf, weights, num_layers):
    """HF's loss dict summed with densevit's (the paper's) weights, every layer."""
    total = 0
    for i in range(num_layers):
        tag = '' if i == num_layers - 1 else f'_{i}'
        total = total + sum(hf[k + tag] * weights[v] for k, v in LOSS_NAMES.items())
    return total


def compare_grads(ours, hf, convert, rtol, atol=1e-12):
    """Every gradient of densevit's parameters against HF's, whose names go through the
    checkpoint converter ``convert`` (so the encoder's q / k / v gradients are fused as the
    weights are): max |ours - HF| <= atol + rtol * max |HF| per tensor (``atol``: the
    rounding noise of gradients that are zero in exact arithmetic, e.g. of key biases,
    which the softmax ignores). Asserts that both have gradients for the same tensors.

    Returns:
        (the largest max |ours - HF| / max |HF| over tensors whose max |HF| > 1e-3,
        the largest absolute difference).
    """
    hf_grads = {k: p.grad for k, p in hf.state_dict(keep_vars=True).items()
                if isinstance(p, torch.nn.Parameter) and p.grad is not None}
    hf_grads = convert(hf_grads, strict=True)
    ours_grads = {k: p.grad for k, p in ours.named_parameters() if p.grad is not None}
    assert set(ours_grads) == set(hf_grads) and len(ours_grads) > 100
    worst_rel = worst_abs = 0.0
    for k, g in ours_grads.items():
        ref = hf_grads[k].to(g.dtype)
        scale, diff = ref.abs().max().item(), (g - ref).abs().max().item()
        assert diff <= atol + rtol * scale, f'{k}: gradient differs by {diff:.3g} (max {scale:.3g})'
        worst_abs = max(worst_abs, diff)
        if scale > 1e-3:
            worst_rel = max(worst_rel, diff / scale)
    return worst_rel, worst_abs


@contextlib.contextmanager
def default_dtype(dtype):
    """HF's DAB-DETR makes its zero queries in the default dtype: float64 needs it set."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)



def assert_eval_outputs_match(ref, out, unmasked):
    """HF's outputs ``ref`` on :func:`padded_batch` and densevit's (``mode='tensor'``)
    ``out``: the last layer's logits and boxes within 1e-4; the queries differ (by 10x the
    tolerance at least), so a mix-up of query rows would show; HF's outputs without the
    padding mask (``unmasked``) differ: the mask matters."""
    assert ref.logits.std(dim=1).min() > 1e-2 and ref.pred_boxes.std(dim=1).min() > 1e-3
    assert (out['pred_logits'][-1] - ref.logits).abs().max() <= 1e-4
    assert (out['pred_boxes'][-1] - ref.pred_boxes).abs().max() <= 1e-4
    assert (unmasked.logits[1] - ref.logits[1]).abs().max() > 1e-3


def float64_training(hf, path, layout, head_type, monkeypatch):
    """Both models in float64 train mode for the training comparison: HF's (a copy) with
    every parameter trainable (HF freezes its backbone; ours trains it: compare it too),
    densevit's loaded from ``path``, both matchers recorded, :func:`padded_batch` in float64.

    Returns:
        namespace of hf, ours, head (``ours.bbox_head``), ours_matches
        (:class:`MatchRecorder`), hf_matches (:func:`record_hf_matches`), x, pixel_mask,
        samples.
    """
    hf = copy.deepcopy(hf).double().train()
    for p in hf.parameters():
        p.requires_grad_(True)
    ours = loaded(path, layout, head_type).double().train()
    head = ours.bbox_head
    head.criterion.matcher = ours_matches = MatchRecorder(head.criterion.matcher)
    hf_matches = record_hf_matches(monkeypatch)
    x, pixel_mask, samples = padded_batch(torch.float64)
    return SimpleNamespace(hf=hf, ours=ours, head=head, ours_matches=ours_matches,
                           hf_matches=hf_matches, x=x, pixel_mask=pixel_mask, samples=samples)


def assert_same_matches(hf_calls, ours_calls):
    """HF's matches (last layer first, then the auxiliary ones) equal densevit's per layer,
    and every layer matched the batch's 3 and 2 boxes."""
    assert per_layer(hf_calls, SIZES['layers']) == ours_calls
    assert all(len(i) == n for calls in ours_calls for (i, _), n in zip(calls, (3, 2), strict=True))


def assert_init_model_loads_whole(hf, path, tmp_path, recipe, head_type):
    """The HF file loads whole through ``init_model`` with :func:`tiny_config` of ``recipe``
    and predicts HF's boxes (within 1e-4)."""
    model = init_model(tiny_config(tmp_path, recipe, head_type), str(path))
    x, pixel_mask, samples = padded_batch()
    with torch.no_grad():
        out = model(x, samples, mode='tensor')
        ref = hf(pixel_values=x, pixel_mask=pixel_mask)
    assert (out['pred_boxes'][-1] - ref.pred_boxes).abs().max() <= 1e-4


def assert_refused(path, tmp_path, recipe, head_type, layout):
    """The HF file (in ``layout``) is refused by ``init_model`` with :func:`tiny_config` of
    another DETR variant's ``recipe``, naming both."""
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(tiny_config(tmp_path, recipe, head_type), str(path))
    message = str(e.value)
    assert f'{layout} checkpoint' in message
    assert f'the config builds DETR(ResNet, {head_type})' in message
