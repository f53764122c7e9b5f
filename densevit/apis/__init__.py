"""Inference without a Runner: :func:`init_model` and :func:`inference`."""
from .inference import inference, init_model

__all__ = ['inference', 'init_model']
