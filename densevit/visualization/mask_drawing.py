"""Masks drawn over an image: each filled in its colour, half see-through, its outline
opaque; and the point inside a mask where its label goes."""
import cv2
import numpy as np


def outline(mask, width):
    """bool [H, W] -> bool [H, W]: the pixels of ``mask`` within ``width`` pixels of its
    edge (the image border is no edge)."""
    if width < 1:
        return np.zeros_like(mask)
    kernel = np.ones((2 * width + 1, 2 * width + 1), np.uint8)
    inner = cv2.erode(mask.astype(np.uint8), kernel, borderType=cv2.BORDER_REPLICATE)
    return mask & ~inner.astype(bool)


def label_point(mask):
    """(x, y) of the pixel of bool [H, W] ``mask`` farthest from its edge and from the image
    border: where the mask's label is centred."""
    padded = np.pad(mask.astype(np.uint8), 1)
    dist = cv2.distanceTransform(padded, cv2.DIST_L2, 3)[1:-1, 1:-1]
    y, x = np.unravel_index(int(dist.argmax()), dist.shape)
    return float(x), float(y)


def paint_masks(image, masks, colors, alpha, outline_width):
    """Draw bool ``masks`` [N, H, W] over ``image`` (uint8 [H, W, 3] RGB, same size).

    Each mask's pixels are blended with its colour (``colors``: N RGB 0-255) at opacity
    ``alpha`` (later masks over earlier ones), then its :func:`outline` of
    ``outline_width`` pixels is set to the colour. Pixels outside every mask keep their
    values. Returns uint8 [H, W, 3].
    """
    drawn = image.astype(np.float32)
    colors = np.asarray(colors, np.float32).reshape(-1, 3)
    for mask, color in zip(masks, colors, strict=True):
        drawn[mask] = (1 - alpha) * drawn[mask] + alpha * color
    for mask, color in zip(masks, colors, strict=True):
        drawn[outline(mask, outline_width)] = color
    return drawn.round().clip(0, 255).astype(np.uint8)
