"""Reduced-precision inference: bf16 autocast, and the parts kept in float32.

Inference in bf16 runs the forward pass under ``torch.autocast(device, bfloat16)``
(:func:`autocast_context`): matrix products and convolutions in bf16, weights kept
in float32. bf16 keeps float32's exponent range but only 8 significant bits
(relative step 2^-8 ≈ 0.4%), which is too coarse for a box coordinate: 0.4% of a
normalised centre of 0.5 is 0.002, a pixel and a half on an 800-pixel image. So
the prediction layers (class and box predictors, the deformable reference points
and box refinement) run through :func:`run_in_fp32`, and post-processing starts
from :func:`at_least_fp32` tensors, so that predictions always leave the model in
float32 (float64 for a model cast to float64). See docs/benchmarks.md for what this
keeps and what it costs.
"""
import contextlib

import torch

PRECISIONS = {'fp32': None, 'bf16': torch.bfloat16}
_LOW = (torch.bfloat16, torch.float16)


def check_precision(precision, where):
    """``precision`` if it is one of :data:`PRECISIONS`, else a ``ValueError`` naming ``where``."""
    if precision not in PRECISIONS:
        raise ValueError(f'{where}: precision must be one of {sorted(PRECISIONS)}, '
                         f'got {precision!r}')
    return precision


def autocast_context(precision, device_type):
    """The context a forward pass in ``precision`` ('fp32' or 'bf16') runs in on
    ``device_type`` ('cpu', 'cuda'): ``torch.autocast`` for bf16, nothing for fp32."""
    dtype = PRECISIONS[check_precision(precision, 'autocast_context')]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def at_least_fp32(x):
    """x with bf16 / fp16 raised to float32; float32 and float64 unchanged (any shape)."""
    return x.float() if x.dtype in _LOW else x


def run_in_fp32(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with autocast switched off and the tensor arguments raised to
    float32 when autocast is on (a module's float32 weights are used as they are);
    otherwise a plain call in the model's own dtype (a model cast whole to bf16 / float64
    stays so).

    Args:
        fn (callable): e.g. a predictor ``Linear`` / ``MLP`` (input [..., D]) or a
            transformer decoder.
        *args, **kwargs: its inputs; tensors among them are raised, others passed as given.
    """
    tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
    if not tensors or not torch.is_autocast_enabled(tensors[0].device.type):
        return fn(*args, **kwargs)

    def raise_(a):
        return at_least_fp32(a) if torch.is_tensor(a) else a
    with torch.autocast(tensors[0].device.type, enabled=False):
        return fn(*map(raise_, args), **{k: raise_(v) for k, v in kwargs.items()})
