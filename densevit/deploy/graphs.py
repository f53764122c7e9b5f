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
MASK_INPUTS = ('inputs',)
MASK_OUTPUTS = ('class_logits', 'mask_logits')


def task_of(model):
    """'seg' for an ``EncoderDecoder``-like model, 'det' for ``DETR`` / ``DeformableDETR``,
    'mask' for a mask classifier (``EoMT``, ``Mask2Former``: a class and a mask per query)."""
    if hasattr(model, 'final_prediction') and hasattr(model, 'postprocess'):
        return 'mask'
    if hasattr(model, 'decode_head') and hasattr(model, 'encode_decode'):
        return 'seg'
    if hasattr(model, 'bbox_head') and hasattr(model, 'feature_mask'):
        return 'det'
    raise TypeError(f'densevit.deploy: cannot export {type(model).__name__}: only segmentors '
                    f'(EncoderDecoder), detectors (DETR, DeformableDETR) and mask classifiers (EoMT, '
                    f'Mask2Former) have an ONNX graph')


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


class MaskClassifierGraph(nn.Module):
    """inputs [B, 3, H, W] -> class_logits [B, Q, K+1], mask_logits [B, Q, h, w]: the final
    prediction set of the model's ``final_prediction`` in eval mode (what ``predict``
    post-processes). EoMT: without masked attention, masks at the mask module's resolution
    (h, w = the patch grid x 2 ** upscaling blocks); Mask2Former: with its masked attention
    (no random draw), masks at a quarter of the input. The semantic, panoptic and instance
    outputs are the model's post-processing of these two."""

    input_names, output_names = MASK_INPUTS, MASK_OUTPUTS

    def __init__(self, model):
        super().__init__()
        if model.test_cfg.get('masked_attention'):
            raise ValueError('densevit.deploy: test_cfg.masked_attention=True draws random '
                             'numbers at inference; a graph is exported without it (set it to '
                             'False: a trained model has annealed it away)')
        self.model = model

    def forward(self, inputs):
        masks, classes = self.model.final_prediction(inputs)
        return classes, masks

    def example_inputs(self, batch=2, size=(64, 64)):
        return (torch.randn(batch, 3, *size),)


def graph_for(model):
    """The exportable module of ``model`` (in eval mode)."""
    graphs = dict(seg=SegmentorGraph, det=DetectorGraph, mask=MaskClassifierGraph)
    graph = graphs[task_of(model)](model)
    return graph.eval()
