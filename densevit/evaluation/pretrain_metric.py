"""The validation score of self-supervised pre-training: the objective's own loss, per image."""
from mmengine.evaluator import BaseMetric

from densevit.registry import METRICS

# what a pre-training model's predict mode writes on each DataSample, and the metric's names.
# Not 'loss': mmengine's LogProcessor averages every logged key matching '.*loss.*' over its
# window, so the log and vis_data/scalars.json would show a mean of successive validations.
FIELDS = {'pretrain_loss': 'objective', 'pretrain_acc': 'acc'}


@METRICS.register_module()
class PretrainLossMetric(BaseMetric):
    """Mean over the validation images of each image's pre-training loss (and accuracy).

    Reads ``pretrain_loss`` (MAE: mean squared error on the masked patches; masked patch
    prediction: cross-entropy on the corrupted ones) and, where present,
    ``pretrain_acc`` from the predicted DataSamples (see :class:`~densevit.models.
    selfsup.mae.MAE` and :class:`~densevit.models.selfsup.mpp.MaskedPatchPrediction`).
    The evaluation masks are the same at every validation, so the numbers compare.

    Returns ``{'pretrain/objective': ..., 'pretrain/acc': ...}`` (the prefix is
    ``prefix``); a lower objective is better.
    """

    default_prefix = 'pretrain'

    def process(self, data_batch, data_samples):
        for ds in data_samples:
            self.results.append({name: float(ds[key]) for key, name in FIELDS.items()
                                 if key in ds})

    def compute_metrics(self, results):
        if not results:
            raise ValueError('PretrainLossMetric: no validation images were scored')
        names = [name for name in FIELDS.values() if name in results[0]]
        return {name: sum(r[name] for r in results) / len(results) for name in names}
