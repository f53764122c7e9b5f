"""Sliding-window inference: logits of overlapping crops, averaged per pixel.

For an axis of length ``L``, a window of ``c = min(crop, L)`` pixels and a stride
``s``, there are ``n = (L - c + s - 1) // s + 1`` windows starting at ``i * s``; the
last one is shifted back to end exactly at the border (so no window hangs over the
edge and none needs padding). Each pixel's logits are the sum over the windows
covering it divided by how many cover it.
"""
import torch
import torch.nn.functional as F


def window_starts(length, crop, stride):
    """Start offsets along one axis; every window is ``min(crop, length)`` long."""
    crop = min(crop, length)
    num = (length - crop + stride - 1) // stride + 1
    return [min(i * stride, length - crop) for i in range(num)]


def sliding_windows(height, width, crop_size, stride):
    """Windows ``(y0, y1, x0, x1)`` (row-major) covering a ``height x width`` image.

    Args:
        crop_size, stride (tuple[int, int]): (h, w); stride must not exceed the crop,
            otherwise pixels between windows would be covered by none.
    """
    (ch, cw), (sh, sw) = crop_size, stride
    if sh > ch or sw > cw or min(ch, cw, sh, sw) <= 0:
        raise ValueError(f'slide inference needs 0 < stride <= crop_size, got stride {stride} '
                         f'and crop_size {crop_size}')
    ch, cw = min(ch, height), min(cw, width)
    return [(y, y + ch, x, x + cw)
            for y in window_starts(height, ch, sh) for x in window_starts(width, cw, sw)]


def slide_logits(predict_fn, inputs, crop_size, stride, batch_windows=1, align_corners=False):
    """Per-pixel mean of window logits.

    Args:
        predict_fn (callable): ``[N, C, h, w] -> [N, K, h', w']`` logits of crops.
        inputs (Tensor): [B, C, H, W] batch.
        crop_size, stride (tuple[int, int]): (h, w) window size and step.
        batch_windows (int): windows run through ``predict_fn`` together (each with
            all B images: a call sees ``B * batch_windows`` crops). Only one such
            group's activations and logits are alive at a time: beyond the [B, K, H, W]
            accumulator (which becomes the result, divided in place), memory does not
            grow with the number of windows.
        align_corners (bool): for resizing window logits to the window size.

    Returns:
        Tensor: [B, K, H, W] logits.
    """
    B, _, H, W = inputs.shape
    windows = sliding_windows(H, W, crop_size, stride)
    logits = count = None
    step = max(int(batch_windows), 1)
    for i in range(0, len(windows), step):
        group = windows[i:i + step]
        crops = torch.cat([inputs[:, :, y0:y1, x0:x1] for y0, y1, x0, x1 in group])
        out = predict_fn(crops)
        if out.shape[-2:] != crops.shape[-2:]:  # (a same-size resize would only copy)
            out = F.interpolate(out, size=crops.shape[-2:], mode='bilinear',
                                align_corners=align_corners)
        if logits is None:  # K is known only once the head has run
            logits = out.new_zeros(B, out.shape[1], H, W)
            count = out.new_zeros(1, 1, H, W)
        for j, (y0, y1, x0, x1) in enumerate(group):
            logits[:, :, y0:y1, x0:x1] += out[j * B:(j + 1) * B]
            count[:, :, y0:y1, x0:x1] += 1
        # free this group's crops and window-sized logits before the next group's forward
        del crops, out
    return logits.div_(count)
