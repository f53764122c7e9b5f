"""A limit on the size of the images a model is given, counted in patch tokens.

A ViT's attention grows with the square of its token count, so an image far larger than
the pipeline meant (a 6000x4000 photo through a test pipeline without a ``Resize``:
375,000 tokens of 8x8 pixels) computes for minutes, or hours, before anything is printed.
:class:`TokenLimitedPreprocessor`, the base of ``DetDataPreprocessor`` and
``SegDataPreprocessor``, checks every image of a batch before normalising or padding it
and stops with :class:`ImageTooLargeError`: one line naming the file, its size, its token
count, the limit and the config key that sets it.
"""
import math

from mmengine.model import ImgDataPreprocessor

DEFAULT_MAX_TOKENS = 2 ** 16
LIMIT_KEY = 'model.data_preprocessor.max_tokens'


class ImageTooLargeError(ValueError):
    """An image with more patch tokens than the data preprocessor's ``max_tokens``."""


def image_tokens(height, width, patch_size):
    """Patch tokens of a ``height x width`` image (partial patches count, as padded)."""
    return math.ceil(height / patch_size) * math.ceil(width / patch_size)


def check_token_count(inputs, data_samples, patch_size, max_tokens):
    """Raise :class:`ImageTooLargeError` for the first image in ``inputs`` ([C, H, W] each,
    or a [B, C, H, W] batch) with more than ``max_tokens`` patches of ``patch_size``
    pixels; ``max_tokens=None`` checks nothing. The file comes from the image's
    DataSample (``img_path``)."""
    if max_tokens is None:
        return
    samples = list(data_samples or ())
    for i, img in enumerate(inputs):
        h, w = img.shape[-2:]
        tokens = image_tokens(h, w, patch_size)
        if tokens <= max_tokens:
            continue
        path = samples[i].metainfo.get('img_path') if i < len(samples) else None
        raise ImageTooLargeError(
            f"image {path or '(an array, no file)'} is {w}x{h} pixels (WxH) after the "
            f'pipeline: {tokens:,} tokens of {patch_size}x{patch_size} pixels, over the limit '
            f'of {max_tokens:,} ({LIMIT_KEY}). Resize it in the pipeline (a Resize after '
            f'LoadImage, as configs/_base_/datasets/coco_detection.py has), or raise the '
            f'limit: --cfg-options {LIMIT_KEY}=N (None: no limit)')


class TokenLimitedPreprocessor(ImgDataPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` that first refuses images over ``max_tokens``.

    Args:
        patch_size (int): pixels per token side the limit counts in: the ViT's patch
            size (for other backbones a measure of size only; default ViT-B/16's 16).
        max_tokens (int | None): the most tokens one image may have (default 65,536:
            4096x4096 pixels at 16, 2048x2048 at 8); None: no limit.
        Other arguments: ``ImgDataPreprocessor``'s.
    """

    def __init__(self, *args, patch_size=16, max_tokens=DEFAULT_MAX_TOKENS, **kwargs):
        super().__init__(*args, **kwargs)
        if int(patch_size) < 1 or (max_tokens is not None and int(max_tokens) < 1):
            raise ValueError(f'data preprocessor: patch_size and max_tokens must be positive '
                             f'(max_tokens may be None), got {patch_size} and {max_tokens}')
        self.patch_size = int(patch_size)
        self.max_tokens = None if max_tokens is None else int(max_tokens)

    def forward(self, data, training=False):
        check_token_count(data['inputs'], data.get('data_samples'), self.patch_size,
                          self.max_tokens)
        return super().forward(data, training)
