"""What the comparisons of densevit's mask classifiers with HF transformers' (EoMT,
Mask2Former) share: the saved random reference, densevit's criterion for its config, the same
random draws given to both sides, calls recorded, the largest difference of two sets of
predictions and the comparison of the gradients."""
import torch

from densevit.utils.random_init import randomize_


def saved_random_model(model_class, config, path):
    """``model_class(config)`` (an HF model) with every saved tensor re-drawn (embeddings such
    as the queries N(0, 1)), written by ``save_pretrained`` under ``path`` -> (the model in
    eval mode, its ``model.safetensors``)."""
    torch.manual_seed(0)
    model = model_class(config)
    randomize_(model, seed=1, embedding_scale=1.0)
    model.save_pretrained(path)
    return model.eval(), path / 'model.safetensors'


def criterion_cfg(config):
    """densevit's ``MaskSetCriterion`` for an HF config's loss settings."""
    return dict(type='MaskSetCriterion', num_points=config.train_num_points,
                oversample_ratio=config.oversample_ratio,
                importance_sample_ratio=config.importance_sample_ratio,
                no_object_weight=config.no_object_weight)


class GivenDraws:
    """densevit's side of the draws (a model's ``draws``): by name, in the order of the calls
    of each name."""

    def __init__(self, queues):
        self.queues = {k: list(v) for k, v in queues.items()}

    def __call__(self, name, shape, device=None, dtype=torch.float32):
        out = self.queues[name].pop(0)
        assert tuple(out.shape) == tuple(shape), (name, out.shape, shape)
        return out


def hf_rand(queues, num_points, importance_sample_ratio=0.75, oversample_ratio=3):
    """A stand-in for ``torch.rand`` inside HF's forward and loss: the same draws, told apart by
    HF's shapes: [B, Q] EoMT's masking (``'query_unmask'``), [1, P, 2] the matcher's points,
    [M, kP, 2] the oversampled and [M, P - rP, 2] the random points of the loss; [] the layer
    drop of Mask2Former's decoder, which transformers 5.17 draws for every layer even when
    ``dropout`` is 0 (5.24 only when it is not): 1, never below the rate, so no layer drops.
    Returns the function and its queues (empty once every draw is used)."""
    queues = {k: list(v) for k, v in queues.items()}
    kinds = {num_points: 'match_points',
             int(oversample_ratio * num_points): 'oversampled_points',
             num_points - int(importance_sample_ratio * num_points): 'random_points'}

    def rand(*size, **kwargs):
        size = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
        if not size:
            return torch.ones(())
        name = 'query_unmask' if len(size) == 2 else kinds[size[1]]
        out = queues[name].pop(0)
        if name == 'match_points':
            out = out[None]
        assert tuple(out.shape) == size, (name, out.shape, size)
        return out
    return rand, queues


def recorded(calls, fn):
    """``fn`` that appends each result to ``calls``."""
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls.append(out)
        return out
    return wrapper


def max_diffs(ours, hf_masks, hf_classes):
    """Max |ours - HF| of the mask and class logits over every prediction set (``ours``: a
    dict of ``mask_logits`` and ``class_logits``, sequences as long as HF's)."""
    assert len(ours['mask_logits']) == len(hf_masks) == len(hf_classes)
    mask = max((a - b).abs().max().item()
               for a, b in zip(ours['mask_logits'], hf_masks, strict=True))
    cls = max((a - b).abs().max().item()
              for a, b in zip(ours['class_logits'], hf_classes, strict=True))
    return mask, cls


def compare_gradients(model, hf, convert, trim=None):
    """Every parameter gradient of densevit's ``model`` against HF's ``hf`` (renamed by the
    converter ``convert``; ``trim``: {name: fn} applied to both first): the same tensors, each
    within 1e-12 + 1e-9 times the largest magnitude of HF's. Returns the largest relative
    difference over the tensors that are not zero but for rounding (largest above 1e-9) and
    their count."""
    hf_grads = {k: p.grad for k, p in hf.state_dict(keep_vars=True).items()
                if isinstance(p, torch.nn.Parameter) and p.grad is not None}
    hf_grads = convert(hf_grads, strict=True)
    ours = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert set(ours) == set(hf_grads)
    worst = 0.0
    for k, g in ours.items():
        ref = hf_grads[k]
        if trim and k in trim:
            g, ref = trim[k](g), trim[k](ref)
        diff, scale = (g - ref).abs().max().item(), ref.abs().max().item()
        assert diff <= 1e-12 + 1e-9 * scale, f'{k}: gradient differs by {diff:.3g} ({scale:.3g})'
        if scale > 1e-9:
            worst = max(worst, diff / scale)
    return worst, len(ours)
