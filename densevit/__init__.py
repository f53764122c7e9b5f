"""densevit: object detection and semantic segmentation on Vision Transformers."""
from .checkpoint.read import allow_checkpoint_types

__version__ = '0.1.0'

allow_checkpoint_types()
