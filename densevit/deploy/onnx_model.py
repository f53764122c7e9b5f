"""A model whose tensor forward runs in ONNX Runtime, with PyTorch's data handling.

:class:`OnnxRuntimeModel` keeps the PyTorch model's data preprocessor (normalise, pad,
record ``img_shape``) and post-processing (``EncoderDecoder.postprocess``,
``DETR.postprocess``, ``EoMT.postprocess``), and replaces only the network by an exported graph, so that
``test_step`` (mmengine's contract: data preprocessor, then ``forward(mode='predict')``)
fills the same ``DataSample`` fields and a Runner's dataset, pipeline and metric are
unchanged. Like the PyTorch models, ``test_step`` runs each group of same-size images of
a batch on its own (``densevit/models/size_groups.py``).
"""
from mmengine.model import BaseModel

from densevit.models.segmentors.sliding_window import slide_logits
from densevit.models.size_groups import SizeGroupedPredict

from .graphs import task_of
from .runtime import OnnxGraph


class OnnxRuntimeModel(SizeGroupedPredict, BaseModel):
    """``model`` with its network replaced by the ONNX graph in ``onnx_file``.

    Args:
        model: the PyTorch segmentor / detector built from the same config (its weights
            are not used; its data preprocessor and post-processing are).
        onnx_file (str): a graph exported by ``tools/deploy/export_onnx.py``; its input /
            output names and opset are checked (``runtime.check_onnx_file``).
        threads (int | None): ONNX Runtime intra-op threads (None: its default).
    """

    def __init__(self, model, onnx_file, threads=None):
        super().__init__(data_preprocessor=model.data_preprocessor)
        self.task = task_of(model)
        self.torch_model = model.eval()
        self.onnx_file = str(onnx_file)
        if self.task == 'mask' and model.test_cfg['mode'] != 'whole':
            raise ValueError("densevit.deploy: the mask classifier's ONNX graph runs whole "
                             f"images; the config's test_cfg.mode is {model.test_cfg['mode']!r}")
        self.graph = OnnxGraph(onnx_file, self.task, threads=threads)

    def seg_logits(self, inputs):
        """[B, 3, H, W] -> [B, K, H, W], whole-image or sliding windows as the model's
        ``test_cfg`` says (the windows run in ONNX Runtime)."""
        cfg = self.torch_model.test_cfg
        if cfg['mode'] == 'whole':
            return self.graph(inputs)
        return slide_logits(self.graph, inputs, tuple(cfg['crop_size']), tuple(cfg['stride']),
                            cfg.get('batch_windows', 1), self.torch_model.align_corners)

    def forward(self, inputs, data_samples=None, mode='predict'):
        """``mode='predict'``: DataSamples as the PyTorch model's ``predict`` fills them;
        ``mode='tensor'``: the graph's raw outputs."""
        m = self.torch_model
        if self.task == 'mask':
            if mode == 'tensor':
                return self.graph(inputs)
            if mode == 'predict':
                return m.postprocess(*reversed(self.graph(inputs)), data_samples,
                                     tuple(inputs.shape[-2:]))
        elif self.task == 'seg':
            if mode == 'tensor':
                return self.seg_logits(inputs)
            if mode == 'predict':
                return m.postprocess(self.seg_logits(inputs), data_samples)
        else:
            mask = m.pixel_mask(inputs, data_samples)
            if mode == 'tensor':
                return self.graph(inputs, mask)
            if mode == 'predict':
                return m.postprocess(*self.graph(inputs, mask), data_samples)
        raise ValueError(f"OnnxRuntimeModel.forward: mode must be 'predict' or 'tensor' "
                         f'(an ONNX graph does not train), got {mode!r}')
