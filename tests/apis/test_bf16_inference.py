"""bf16 inference (densevit/utils/precision.py): the same predictions as fp32 within bf16's
precision, float32 predictions that the metrics accept, and a DETR criterion that works
on a model cast whole to bf16 / float64."""
from pathlib import Path

import pytest
import torch

import densevit  # noqa: F401
from densevit.apis import inference, init_model
from densevit.utils.precision import at_least_fp32, autocast_context, run_in_fp32

from tiny_checkpoints import val_images

REPO = Path(__file__).resolve().parents[2]


def test_precision_helpers():
    lin = torch.nn.Linear(8, 3)
    x = torch.randn(5, 8)
    ref = lin(x)
    with autocast_context('bf16', 'cpu'):
        assert lin(x).dtype == torch.bfloat16
        assert run_in_fp32(lin, x.bfloat16()).dtype == torch.float32
        torch.testing.assert_close(run_in_fp32(lin, x), ref, rtol=0, atol=0)
    assert at_least_fp32(x.double()).dtype == torch.float64
    assert run_in_fp32(lin.double(), x.double()).dtype == torch.float64
    with pytest.raises(ValueError, match='init_model: precision must be one of'):
        init_model(REPO / 'tests' / 'configs' / 'tiny_detr_shapes.py', precision='fp8')


def head_outputs(model, images, precision):
    """The last decoder layer's class probabilities [B, Q, K+1] and boxes [B, Q, 4]."""
    from mmengine.dataset import pseudo_collate

    from densevit.apis.inference import split_test_pipeline
    load, rest = split_test_pipeline(model.cfg)
    data = model.data_preprocessor(pseudo_collate([rest(load(dict(img_path=str(p))))
                                                   for p in images]), False)
    with torch.no_grad(), autocast_context(precision, 'cpu'):
        out = model(**data, mode='tensor')
    return out['pred_logits'][-1].softmax(-1), out['pred_boxes'][-1]


def test_detector_bf16_matches_fp32(det):
    """Head outputs: probabilities within 0.01, normalised boxes within 1e-3 (measured:
    1.3e-3 and 1.7e-4); the best class identical wherever fp32's leads the runner-up by
    more than 0.01. Final predictions: float32, boxes within 0.25 pixel (measured 0.012),
    labels identical."""
    model = init_model(det['config'], det['ckpt'])
    images = val_images(det, 4)
    p32, b32 = head_outputs(model, images, 'fp32')
    p16, b16 = head_outputs(model, images, 'bf16')
    assert p16.dtype == b16.dtype == torch.float32
    assert (p16 - p32).abs().max() < 0.01 and (b16 - b32).abs().max() < 1e-3
    top2 = p32[..., :-1].topk(2, -1).values
    decided = top2[..., 0] - top2[..., 1] > 0.01
    assert decided.float().mean() > 0.5  # the comparison is not empty
    assert torch.equal(p16[..., :-1].argmax(-1)[decided], p32[..., :-1].argmax(-1)[decided])

    ref = inference(model, images)
    low = inference(init_model(det['config'], det['ckpt'], precision='bf16'), images)
    for r, b in zip(ref, low, strict=True):
        r, b = r.pred_instances, b.pred_instances
        assert b.bboxes.dtype == b.scores.dtype == torch.float32
        assert r.bboxes.max() > 10  # boxes in pixels of a 48-pixel image
        assert (b.bboxes - r.bboxes).abs().max() < 0.25
        assert (b.scores - r.scores).abs().max() < 0.01
        assert torch.equal(b.labels, r.labels)
    # without autocast the model gives fp32's own predictions, bit for bit
    same = inference(model, images[0], precision='fp32').pred_instances
    assert torch.equal(same.bboxes, ref[0].pred_instances.bboxes)


def test_segmentor_bf16_matches_fp32(seg):
    """float32 logits within 0.05 of fp32's, and at least 99% of pixels the same class.

    The 4-iteration model's class logits are nearly tied on many pixels, so a few flip:
    0.3% on CPU, 0.7% with CUDA's bf16 kernels (H100).
    """
    model = init_model(seg['config'], seg['ckpt'])
    images = val_images(seg, 3)
    ref = inference(model, images)
    low = inference(model, images, precision='bf16')
    for r, b in zip(ref, low, strict=True):
        assert b.seg_logits.data.dtype == torch.float32
        assert (b.seg_logits.data - r.seg_logits.data).abs().max() < 0.05
        same = (b.pred_sem_seg.data == r.pred_sem_seg.data).float().mean()
        assert same >= 0.99


def test_forward_runs_in_bf16(det):
    """The forward pass really runs in bf16: the backbone's first Linear returns bf16."""
    model = init_model(det['config'], det['ckpt'], precision='bf16')
    seen = []
    linear = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Linear))
    hook = linear.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    inference(model, val_images(det, 1)[0])
    hook.remove()
    assert seen == [torch.bfloat16]
