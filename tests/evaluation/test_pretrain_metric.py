"""PretrainLossMetric: the mean of the per-image pre-training objective (and accuracy)."""
import pytest
import torch

from densevit.evaluation.pretrain_metric import PretrainLossMetric
from densevit.structures import DataSample


def sample(loss, acc=None):
    ds = DataSample(pretrain_loss=torch.tensor(loss))
    if acc is not None:
        ds.pretrain_acc = torch.tensor(acc)
    return ds.to_dict()  # as mmengine's Evaluator hands predictions to a metric


def test_means_over_images_with_the_pretrain_prefix():
    metric = PretrainLossMetric()
    metric.process({}, [sample(1.0), sample(2.0)])
    metric.process({}, [sample(4.5)])
    assert metric.evaluate(3) == {'pretrain/objective': pytest.approx(2.5)}
    metric.process({}, [sample(1.0, 0.25), sample(3.0, 0.75)])
    assert metric.evaluate(2) == {'pretrain/objective': pytest.approx(2.0),
                                  'pretrain/acc': pytest.approx(0.5)}
