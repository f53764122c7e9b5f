"""Small images drawn larger: an integer factor that brings the shorter side to at least
``MIN_SIDE`` pixels, each pixel becoming a block (nearest neighbour), so that labels are
readable beside the objects instead of over them. Maps and masks of any size are fitted to
the drawn image the same way."""
import cv2
import numpy as np

MIN_SIDE = 512


def enlarge_factor(shape, min_side=MIN_SIDE):
    """The integer factor (>= 1) that brings the shorter side of ``shape`` (H, W, ...) to at
    least ``min_side`` pixels; 1 for an image already that large, or ``min_side`` 0 / None."""
    short = int(min(shape[:2]))
    if not min_side or short >= min_side or short < 1:
        return 1
    return -(-int(min_side) // short)


def enlarge(image, factor):
    """``image`` [H, W, ...] -> [H * factor, W * factor, ...], each pixel a factor x factor
    block (the array itself when ``factor`` is 1)."""
    if factor == 1:
        return image
    return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)


def fit_map(values, shape):
    """An integer or bool map [h, w] resized nearest-neighbour to ``shape`` (H, W) (an
    integer factor repeats each value in a block); unchanged when it has that size.
    Integer values must fit int32."""
    values = np.asarray(values)
    if values.shape == tuple(shape[:2]):
        return values
    work = values.astype(np.uint8 if values.dtype == bool else np.int32)
    resized = cv2.resize(work, (int(shape[1]), int(shape[0])), interpolation=cv2.INTER_NEAREST)
    return resized.astype(values.dtype)


def fit_masks(masks, shape):
    """bool masks [N, h, w] -> bool [N, H, W] for ``shape`` (H, W) (:func:`fit_map`)."""
    masks = np.asarray(masks, bool)
    return np.stack([fit_map(m, shape) for m in masks]) if len(masks) else \
        np.zeros((0, *shape[:2]), bool)
