"""Run an exported graph with ONNX Runtime, after checking it is the graph expected."""
import re
from pathlib import Path

import numpy as np
import torch

from .export import MIN_OPSET
from .graphs import DET_INPUTS, DET_OUTPUTS, MASK_INPUTS, MASK_OUTPUTS, SEG_INPUTS, SEG_OUTPUTS

EXPECTED = dict(seg=(SEG_INPUTS, SEG_OUTPUTS), det=(DET_INPUTS, DET_OUTPUTS),
                mask=(MASK_INPUTS, MASK_OUTPUTS))
KINDS = dict(seg='segmentor', det='detector', mask='mask classifier')


class OnnxGraphError(ValueError):
    """An ONNX file that is not the graph a densevit model of this task exports."""


def check_onnx_file(path, task):
    """Raise :class:`OnnxGraphError` unless the file at ``path`` has the input / output
    names of a ``task`` ('seg', 'det' or 'mask') graph and an opset >= ``MIN_OPSET``."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise OnnxGraphError(f'densevit.deploy: {path}: no such ONNX file')
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001  (a file that is not ONNX at all)
        raise OnnxGraphError(f'densevit.deploy: {path} is not a readable ONNX file '
                             f'({type(e).__name__}: {e})') from e
    inputs, outputs = EXPECTED[task]
    got_in = tuple(i.name for i in proto.graph.input)
    got_out = tuple(o.name for o in proto.graph.output)
    kind = KINDS[task]
    if got_in != inputs or got_out[:len(outputs)] != outputs:
        raise OnnxGraphError(
            f'densevit.deploy: {path} has inputs {list(got_in)} and outputs {list(got_out)}, '
            f'but a densevit {kind} graph has inputs {list(inputs)} and outputs '
            f'{list(outputs)}: export it with tools/deploy/export_onnx.py from the same config')
    opset = max((o.version for o in proto.opset_import if o.domain in ('', 'ai.onnx')),
                default=0)
    if opset < MIN_OPSET:
        raise OnnxGraphError(f'densevit.deploy: {path} uses ONNX opset {opset}; densevit '
                             f'graphs need opset >= {MIN_OPSET} (re-export with --opset)')


def batch_sizes(batch_size, num_images, drop_last=False):
    """The distinct batch sizes a data loader of ``batch_size`` gives for ``num_images``:
    the full batches' and the last, smaller one's (unless ``drop_last``)."""
    sizes = {batch_size} if num_images >= batch_size else set()
    if num_images % batch_size and not drop_last:
        sizes.add(num_images % batch_size)
    return sorted(sizes)


def check_fixed_batch(graph, batch_size, num_images, drop_last=False):
    """Raise :class:`OnnxGraphError` when ``graph`` (an :class:`OnnxGraph`), exported with a
    fixed batch (``export_onnx.py`` without ``--dynamic``), cannot take every batch of a
    test data loader of ``batch_size`` over ``num_images`` images: ONNX Runtime would
    otherwise stop with a shape error at the first batch of another size, often the
    last, smaller one, after the others have run. A dynamic batch passes."""
    shape = graph.session.get_inputs()[0].shape
    fixed = shape[0] if shape and isinstance(shape[0], int) else None
    if fixed is None:
        return
    bad = [b for b in batch_sizes(batch_size, num_images, drop_last) if b != fixed]
    if not bad:
        return
    which = ('the last batch' if bad == [num_images % batch_size] and num_images > batch_size
             else 'a batch')
    hint = (f' or set test_dataloader.batch_size={fixed}' if num_images % fixed == 0 else
            f' (test_dataloader.batch_size={fixed} would leave a last batch of '
            f'{num_images % fixed})')
    raise OnnxGraphError(
        f'densevit.deploy: {graph.path} was exported with the fixed input shape {shape} '
        f'(batch {fixed}), but {which} of the test data holds {bad[0]} image(s) '
        f'({num_images} images in batches of {batch_size}): re-export it with '
        f'tools/deploy/export_onnx.py CONFIG CHECKPOINT --out {graph.path} --dynamic{hint}')


class OnnxGraph:
    """An ONNX Runtime session on a checked densevit graph, called like the PyTorch graph.

    ``graph(inputs)`` (segmentation) -> seg_logits [B, K, H, W];
    ``graph(inputs, pixel_mask)`` (detection) -> (pred_logits [B, Q, C], pred_boxes [B, Q, 4]);
    ``graph(inputs)`` (mask classification) -> (class_logits [B, Q, K+1], mask_logits
    [B, Q, h, w]);
    torch tensors in and out (on the CPU).
    """

    def __init__(self, path, task, providers=('CPUExecutionProvider',), threads=None):
        import onnxruntime as ort

        check_onnx_file(path, task)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        # ONNX Runtime's idle workers otherwise spin for a while after each run, taking
        # the cores from the PyTorch post-processing (and data loading) that comes next
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
        self.path, self.task = str(path), task
        self.input_names, self.output_names = EXPECTED[task]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=list(providers))
        except Exception as e:  # noqa: BLE001  (ONNX Runtime raises its own Fail type)
            found = re.search(r'Unsupported model IR version: (\d+), max supported IR version: '
                              r'(\d+)', str(e))
            if not found:
                raise
            raise OnnxGraphError(
                f'densevit.deploy: {path} has ONNX IR version {found[1]}, newer than this '
                f'onnxruntime {ort.__version__} reads (at most {found[2]}): upgrade onnxruntime, '
                f'or export with an onnx package as old as it') from None

    def __call__(self, *tensors):
        feed = {}
        for name, t in zip(self.input_names, tensors, strict=True):
            t = t.detach().cpu()
            feed[name] = t.numpy() if t.dtype == torch.bool else t.float().numpy()
        outs = self.session.run(list(self.output_names), feed)
        outs = [torch.from_numpy(np.ascontiguousarray(o)) for o in outs]
        return outs[0] if self.task == 'seg' else tuple(outs)
