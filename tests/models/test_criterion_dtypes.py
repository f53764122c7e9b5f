"""SetCriterion / HungarianMatcher on bf16 and float64 predictions, and a DETR cast whole
(``model.to(dtype)``): the no-object class weight follows the logits, losses are computed
in float32 at least (float64 stays float64)."""
import pytest
import torch
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope

import densevit  # noqa: F401
from densevit.apis import init_model
from densevit.models.losses.set_criterion import SetCriterion


def outputs_and_targets(seed=0, B=2, Q=6, K=3):
    g = torch.Generator().manual_seed(seed)
    out = dict(pred_logits=torch.randn(B, Q, K + 1, generator=g, dtype=torch.float64),
               pred_boxes=torch.rand(B, Q, 4, generator=g, dtype=torch.float64) * 0.5 + 0.25)
    targets = [dict(labels=torch.tensor([0, 2]), boxes=torch.tensor([[.3, .3, .2, .2],
                                                                      [.6, .5, .3, .4]])),
               dict(labels=torch.tensor([1]), boxes=torch.tensor([[.5, .5, .4, .3]]))]
    return out, targets


@pytest.mark.parametrize('use_focal', [False, True])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float64])
def test_criterion_follows_the_logits_dtype(dtype, use_focal):
    """The criterion cast to ``dtype`` (its class-weight buffer too) on ``dtype`` predictions
    gives the float64 losses of the same values: exactly up to float32 rounding for bf16
    inputs (computed in float32), to 1e-12 for float64."""
    out, targets = outputs_and_targets()
    out = {k: v.to(dtype) for k, v in out.items()}  # the values bf16 can hold
    K = out['pred_logits'].shape[-1] - (0 if use_focal else 1)
    if use_focal:
        out['pred_logits'] = out['pred_logits'][..., :K]
    criterion = SetCriterion(num_classes=K, use_focal=use_focal,
                             matcher=dict(type='HungarianMatcher', focal=use_focal))
    ref = SetCriterion(num_classes=K, use_focal=use_focal,
                       matcher=dict(type='HungarianMatcher', focal=use_focal)).double()
    losses = criterion.to(dtype)(out, targets, num_boxes=3.0)
    expected = ref({k: v.double() for k, v in out.items()},
                   [{k: v.double() if v.is_floating_point() else v for k, v in t.items()}
                    for t in targets], num_boxes=3.0)
    want = torch.float32 if dtype == torch.bfloat16 else torch.float64
    for k, v in losses.items():
        assert v.dtype == want, k
        torch.testing.assert_close(v.double(), expected[k], rtol=1e-5 if want == torch.float32
                                   else 1e-12, atol=0)


@pytest.mark.parametrize('dtype', [torch.float64, torch.bfloat16])
def test_whole_detr_cast_trains(det, dtype):
    """``model.to(dtype)``: loss mode runs and gives fp32's losses (float64: to 1e-4;
    bf16, 8-bit mantissas all through: to 10%)."""
    from densevit.registry import DATASETS
    model = init_model(det['config'], det['ckpt'])
    init_default_scope('densevit')
    dataset = DATASETS.build(model.cfg.train_dataloader.dataset)
    batch = model.data_preprocessor(pseudo_collate([dataset[0], dataset[1]]), True)
    ref = model(**batch, mode='loss')
    model = model.to(dtype)
    losses = model(batch['inputs'].to(dtype), batch['data_samples'], mode='loss')
    for k, v in ref.items():
        assert torch.isfinite(losses[k]), k
        tol = 1e-4 if dtype == torch.float64 else 0.1
        torch.testing.assert_close(losses[k].double(), v.double(), rtol=tol, atol=tol)
    assert losses['loss_cls'].dtype == (torch.float64 if dtype == torch.float64
                                        else torch.float32)
