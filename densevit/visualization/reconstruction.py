"""MAE's Figure 2: per image, the masked input, the reconstruction and the original side by side."""
import numpy as np
import torch

MASK_GREY = 128  # the colour of a hidden patch in the masked input
GAP_WHITE = 255


def to_bgr_uint8(img, mean, std, rgb):
    """A normalised image [C, H, W] -> H x W x 3 uint8 BGR (normalisation undone, clipped)."""
    img = img.detach().float().cpu()
    if mean is not None:
        img = img * std.cpu() + mean.cpu()
    out = img.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    if out.shape[2] == 1:
        out = np.repeat(out, 3, axis=2)
    return np.ascontiguousarray(out[..., ::-1] if rgb else out)


def hide_patches(img, patch_mask, patch_size, fill=MASK_GREY):
    """H x W x 3 image with the patches where ``patch_mask`` [h, w] is True filled grey."""
    out = img.copy()
    cells = np.kron(patch_mask.cpu().numpy().astype(np.uint8),
                    np.ones((patch_size, patch_size), np.uint8)).astype(bool)
    out[cells] = fill
    return out


def reconstruction_figure(inputs, recon, patch_mask, patch_size, mean=None, std=None, rgb=True,
                          gap=2):
    """One row per image: masked input | reconstruction | original.

    Args:
        inputs: [B, C, H, W] as the data preprocessor left them.
        recon: [B, C, H, W] the reconstruction in the same space
            (``MAEPretrainHead.reconstruct``).
        patch_mask: [B, h, w] bool, True where a patch was hidden.
        patch_size (int): pixels per patch side.
        mean, std: the data preprocessor's [C, 1, 1] normalisation (None: none).
        rgb (bool): the model's channels are RGB (written as BGR).
        gap (int): white pixels between panels and rows.

    Returns:
        uint8 [B*H + (B-1)*gap, 3*W + 2*gap, 3] BGR.
    """
    rows = []
    for img, rec, hidden in zip(inputs, recon, patch_mask, strict=True):
        original = to_bgr_uint8(img, mean, std, rgb)
        masked = hide_patches(original, hidden, patch_size)
        sep = np.full((original.shape[0], gap, 3), GAP_WHITE, np.uint8)
        rows.append(np.concatenate([masked, sep, to_bgr_uint8(rec, mean, std, rgb), sep,
                                    original], axis=1))
    parts = []
    for i, row in enumerate(rows):
        if i:
            parts.append(np.full((gap, row.shape[1], 3), GAP_WHITE, np.uint8))
        parts.append(row)
    return np.concatenate(parts, axis=0)
