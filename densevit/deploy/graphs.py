"""The tensor functions that are exported to ONNX: one per task, with fixed names.

The graph's image input is what the data preprocessor hands the model: float32
[B, 3, H, W], already normalised (mean / std, BGR->RGB as configured) and padded
bottom / right to a batch. Normalisation and padding stay in the (shared) data
preprocessor, so both backends read the same tensor; the post-processing (cutting the
padding, undoing a flip, resizing to the original image, argmax; box scaling and top-k)
is the model's own ``postprocess``, called on either backend's outputs.
"""
import torch
from torch import nn

#: input / output names of an exported graph, per task (checked when a file is loaded)
SEG_INPUTS = ('inputs',)
SEG_OUTPUTS = ('seg_logits',)
DET_INPUTS = ('inputs', 'pixel_mask')
DET_OUTPUTS = ('pred_logits', 'pred_boxes')


def task_of(model):
    """'seg' for an ``EncoderDecoder``-like model, 'det' for ``DETR`` / ``DeformableDETR``."""
    if hasattr(model, 'decode_head') and hasattr(model, 'encode_decode'):
        return 'seg'
    if hasattr(model, 'bbox_head') and hasattr(model, 'feature_mask'):
        return 'det'
    raise TypeError(f'densevit.deploy: cannot export {type(model).__name__}: only segmentors '
                    f'(EncoderDecoder) and detectors (DETR, DeformableDETR) have an ONNX graph')


class SegmentorGraph(nn.Module):
    """inputs [B, 3, H, W] -> seg_logits [B, K, H, W]: the decode head's logits resized
    bilinearly to the input size (``EncoderDecoder.encode_decode``, whole-image mode)."""

    input_names, output_names = SEG_INPUTS, SEG_OUTPUTS

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs):
        return self.model.encode_decode(inputs)

    def example_inputs(self, batch=2, size=(64, 64)):
        return (torch.randn(batch, 3, *size),)


class DetectorGraph(nn.Module):
    """inputs [B, 3, H, W], pixel_mask [B, H, W] bool (True = batch padding) ->
    pred_logits [B, Q, C], pred_boxes [B, Q, 4] (normalised cxcywh of each unpadded image)
    of the last decoder layer.

    The mask is an input so that a padded batch means what it means in PyTorch, where it
    comes from each image's ``img_shape`` (``DETR.pixel_mask``).
    """

    input_names, output_names = DET_INPUTS, DET_OUTPUTS

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, pixel_mask):
        feat = self.model.extract_feat(inputs)
        out = self.model.bbox_head(feat, self.model.feature_mask(pixel_mask, feat))
        return out['pred_logits'][-1], out['pred_boxes'][-1]

    def example_inputs(self, batch=2, size=(64, 64)):
        mask = torch.zeros(batch, *size, dtype=torch.bool)
        mask[-1, size[0] // 2:] = True  # one image padded: the mask is not a constant
        return torch.randn(batch, 3, *size), mask


def graph_for(model):
    """The exportable module of ``model`` (in eval mode)."""
    graph = dict(seg=SegmentorGraph, det=DetectorGraph)[task_of(model)](model)
    return graph.eval()
