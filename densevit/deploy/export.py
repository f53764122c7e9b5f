"""Export a densevit model to ONNX (torch.export + the dynamo ONNX exporter).

The graph is written unoptimised (``optimize=False``): onnxscript 0.7's optimizer
drops a node of Deformable DETR's ``inverse_sigmoid`` (the file then fails to load),
and ONNX Runtime optimises the graph itself when it opens it.

The TorchScript exporter (``dynamo=False``) traces Python branches on shapes into
constants (e.g. "resize only if the size differs"), so a graph traced at one size is
wrong at another; ``torch.export`` keeps such shapes symbolic. Needs the ``deploy``
extra (``onnx``, ``onnxscript``; ``onnxruntime`` to run the file).
"""
import re
import traceback

import torch
from torch.export import Dim

from .graphs import graph_for

#: the default ONNX opset; grid_sample (Deformable DETR's sampling) needs at least 16
DEFAULT_OPSET = 18
MIN_OPSET = 16


class ExportError(RuntimeError):
    """A model (part) that cannot become an ONNX graph; the message names the module."""


def dynamic_shapes(graph, dynamic):
    """torch.export's ``dynamic_shapes`` for the graph's inputs: batch, height and width
    dynamic (None: every size fixed to the example's)."""
    if not dynamic:
        return None
    d = Dim.DYNAMIC
    shapes = {'inputs': {0: d, 2: d, 3: d}}
    if 'pixel_mask' in graph.input_names:
        shapes['pixel_mask'] = {0: d, 1: d, 2: d}
    return shapes


def _module_names(graph):
    return {id(m): name.removeprefix('model.') or '(the model)'
            for name, m in graph.named_modules()}


def _failing_module(graph, exc):
    """(path, class name) of the innermost module whose ``forward`` was running when
    ``exc`` was raised while tracing, or None."""
    names, found = _module_names(graph), None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        owner = frame.f_locals.get('self')
        if owner is not None and id(owner) in names and owner is not graph:
            found = (names[id(owner)], type(owner).__name__)
    return found


def _chain_text(exc):
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return '\n'.join(parts)


def _node_module(exported, text):
    """The aten op named in an ONNX conversion error and the module (path, class) that
    called it, from the exported program's ``nn_module_stack``."""
    m = re.search(r'target=torch\.ops\.([\w.]+)', text) or \
        re.search(r"op='([\w.]+)', overload='(\w+)'", text)
    if m is None:
        return None, None
    op = m.group(1) if m.re.groups == 1 else f'{m.group(1)}.{m.group(2)}'
    base = op.split('.')[1] if op.startswith('aten.') else op.split('.')[0]
    for node in exported.graph.nodes:
        if node.op == 'call_function' and base in str(node.target).split('.'):
            stack = node.meta.get('nn_module_stack') or {}
            if stack:
                path, cls = list(stack.values())[-1]
                path = re.sub(r'^model\.?', '', str(path)) or '(the model)'
                cls = cls.__name__ if isinstance(cls, type) else str(cls).rsplit('.', 1)[-1]
                return op, (path, cls)
            return op, None
    return op, None


def _first_line(exc):
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f'{type(exc).__name__}: {lines[0] if lines else ""}'


def export_onnx(model, path, dynamic=True, opset=DEFAULT_OPSET, example_size=(96, 128),
                batch=2):
    """Write ``model``'s graph (``densevit/deploy/graphs.py``) to the ONNX file ``path``.

    Args:
        model: a built segmentor or detector (weights loaded); put in eval mode.
        dynamic (bool): batch, height and width dynamic; else fixed to the example.
        opset (int): ONNX opset (>= 16).
        example_size (h, w), batch: the example the graph is traced with. Sizes of 1
            anywhere (a 64-pixel image's stride-64 level, a batch of one) would be fixed
            by torch.export, as would equal height and width: hence 2 x 96 x 128.

    Returns:
        the exported module (``SegmentorGraph`` / ``DetectorGraph``).

    Raises:
        ExportError: naming the module (path in the model and class) whose code cannot
            be traced or has an op with no ONNX equivalent, and the exporter's first line.
    """
    if opset < MIN_OPSET:
        raise ValueError(f'densevit.deploy: opset {opset} is too old: grid_sample (Deformable '
                         f"DETR) and the exporter's resize need opset >= {MIN_OPSET}")
    model.eval()
    graph = graph_for(model)
    args = graph.example_inputs(batch, tuple(example_size))
    kwargs = dict(zip(graph.input_names, args, strict=True))
    try:
        exported = torch.export.export(graph, (), kwargs, dynamic_shapes=dynamic_shapes(
            graph, dynamic), strict=False)
    except Exception as e:  # noqa: BLE001  (any tracing failure becomes one clear line)
        where = _failing_module(graph, e)
        name = f'{where[1]} (model.{where[0]})' if where else type(model).__name__
        raise ExportError(f'densevit.deploy: cannot export {name} to ONNX: its forward cannot '
                          f'be traced with symbolic shapes: {_first_line(e)}') from e
    try:
        program = torch.onnx.export(exported, (), path, kwargs=kwargs,
                                    input_names=list(graph.input_names),
                                    output_names=list(graph.output_names),
                                    opset_version=opset, dynamo=True, verbose=False,
                                    external_data=False, optimize=False)
    except Exception as e:  # noqa: BLE001
        op, where = _node_module(exported, _chain_text(e))
        name = f'{where[1]} (model.{where[0]})' if where else type(model).__name__
        what = f'the op {op} has no ONNX equivalent' if op else _first_line(e)
        raise ExportError(f'densevit.deploy: cannot export {name} to ONNX: {what} '
                          f'(opset {opset})') from e
    if program is None:
        raise ExportError(f'densevit.deploy: the ONNX exporter wrote nothing for '
                          f'{type(model).__name__}')
    return graph
