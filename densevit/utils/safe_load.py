"""Allow-list for ``torch.load(weights_only=True)``.

mmengine 0.10 saves a few non-tensor objects in its checkpoints (its
``HistoryBuffer`` in the message hub, numpy arrays and scalars inside it) and
loads them with ``torch.load`` without ``weights_only``; torch >= 2.6 then
defaults to ``weights_only=True`` and refuses them. We allow exactly these
types, never ``weights_only=False``.
"""
import numpy as np
import torch


def _numpy_types():
    types = [np.ndarray, np.dtype]
    reconstruct = getattr(getattr(np, '_core', np.core), 'multiarray')._reconstruct
    types.append(reconstruct)
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        types += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')]
    types += [np.float64, np.float32, np.int64, np.int32, np.bool_]
    return types


def checkpoint_safe_globals():
    """The non-tensor types found in mmengine checkpoints."""
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer] + _numpy_types()


def allow_checkpoint_types():
    """Register :func:`checkpoint_safe_globals` with torch's weights-only unpickler."""
    torch.serialization.add_safe_globals(checkpoint_safe_globals())
