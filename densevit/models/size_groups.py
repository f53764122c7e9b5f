"""Evaluation batches predicted one image size at a time, so batch size changes nothing.

A batch of images of different sizes is padded (bottom / right) to its largest, and the
padding enters what a network computes: a ViT's or Mix Transformer's attention runs over
the padded tokens (a padding mask reaches only DETR's own transformer), convolutions see
it at the image border, sliding windows cover it. Predictions, and so mIoU / AP, then
depend on the test batch size and on which images share a batch.

:class:`SizeGroupedPredict` makes mmengine's ``val_step`` / ``test_step`` (data
preprocessor, then ``forward(mode='predict')``) split a batch into groups of images of
the same unpadded size (each sample's ``inputs`` before collation), run each group
through the data preprocessor and ``predict`` on its own, and return the predictions in
the batch's order. Within a group the only padding is ``pad_size_divisor``'s, the same as
at batch 1, so a batch of any size predicts what its images predict one at a time.
Training (``train_step``) is unchanged. A batch of one size costs nothing extra; a batch
of n sizes runs n forward passes.

Shared by ``EncoderDecoder``, ``DETR`` / ``DeformableDETR`` and the ONNX Runtime model
(``densevit/deploy/onnx_model.py``); test-time augmentation calls the wrapped model's
``test_step`` once per view, so each view is grouped the same way.
"""


def size_groups(inputs):
    """Indices of ``inputs`` (tensors) grouped by shape, in order of first appearance."""
    groups = {}
    for i, x in enumerate(inputs):
        groups.setdefault(tuple(x.shape), []).append(i)
    return list(groups.values())


def _take(data, indices, n):
    """The items ``indices`` of every per-sample list in ``data`` (the others as they are)."""
    return {k: [v[i] for i in indices] if isinstance(v, (list, tuple)) and len(v) == n else v
            for k, v in data.items()}


def predict_by_size(model, data):
    """``model``'s data preprocessor and ``forward(mode='predict')`` on each group of
    same-size images of ``data`` (mmengine's collated ``dict(inputs=[...],
    data_samples=[...])``) -> the predictions, one per sample, in ``data``'s order.
    A batch already stacked into one tensor, or of one size, is one group."""
    def predict(batch):  # mmengine's BaseModel.test_step
        return model._run_forward(model.data_preprocessor(batch, False), mode='predict')

    inputs = data.get('inputs') if isinstance(data, dict) else None
    groups = size_groups(inputs) if isinstance(inputs, (list, tuple)) else []
    if len(groups) <= 1:
        return predict(data)
    results = [None] * len(inputs)
    for indices in groups:
        for i, prediction in zip(indices, predict(_take(data, indices, len(inputs))),
                                 strict=True):
            results[i] = prediction
    return results


class SizeGroupedPredict:
    """Mixin for an mmengine ``BaseModel``: ``val_step`` and ``test_step`` predict each
    group of same-size images on its own (:func:`predict_by_size`). List it before
    ``BaseModel``."""

    def val_step(self, data):
        return predict_by_size(self, data)

    def test_step(self, data):
        return predict_by_size(self, data)
