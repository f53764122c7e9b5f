"""Allow-list for ``torch.load(weights_only=True)``.

mmengine 0.10 saves a few non-tensor objects in its checkpoints (its
``HistoryBuffer`` in the message hub, numpy arrays and scalars inside it) and
loads them with ``torch.load`` without ``weights_only``; torch >= 2.6 then
defaults to ``weights_only=True`` and refuses them. We allow exactly these
types, never ``weights_only=False``.

One more global is needed: a pickled ``HistoryBuffer`` carries its statistics
methods (``HistoryBuffer.min`` ...), which pickle protocol 2 (torch.save's)
writes as ``getattr(HistoryBuffer, 'min')``. ``builtins.getattr`` itself would
let a file reach any attribute of any allowed object, so the name is bound to
:func:`checkpoint_getattr`, which resolves only those few methods.
"""
import pickle

import numpy as np
import torch

_HISTORY_BUFFER_METHODS = ('min', 'max', 'current', 'mean')


def _numpy_types():
    types = [np.ndarray, np.dtype]
    multiarray = getattr(getattr(np, '_core', np.core), 'multiarray')
    types += [multiarray._reconstruct, multiarray.scalar]  # rebuild arrays / numpy scalars
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        types += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')]
    types += [np.float64, np.float32, np.int64, np.int32, np.bool_]
    return types


def checkpoint_safe_globals():
    """The non-tensor types found in mmengine checkpoints."""
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer] + _numpy_types()


def checkpoint_getattr(obj, name):
    """``getattr`` for the weights-only unpickler: only ``HistoryBuffer``'s statistics methods."""
    from mmengine.logging.history_buffer import HistoryBuffer
    if obj is HistoryBuffer and name in _HISTORY_BUFFER_METHODS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'checkpoint asks for getattr({obj!r}, {name!r}); densevit allows only '
        f'HistoryBuffer.{{{", ".join(_HISTORY_BUFFER_METHODS)}}}')


def allow_checkpoint_types():
    """Register :func:`checkpoint_safe_globals` with torch's weights-only unpickler."""
    torch.serialization.add_safe_globals(
        checkpoint_safe_globals() + [(checkpoint_getattr, 'builtins.getattr')])
