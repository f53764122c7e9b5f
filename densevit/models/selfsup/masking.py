"""Patches as pixel vectors, random masks, BEiT's block masks and the build-time checks of
masked pre-training.

Layouts (used by MAE and masked patch prediction alike):

- **patch grid**: an image [B, C, H, W] with H = h*P, W = w*P has N = h*w patches in
  row-major order (patch ``r*w + c`` covers rows ``r*P..r*P+P-1``, columns
  ``c*P..c*P+P-1``), the order of a ViT's patch tokens.
- **patch vector** (:func:`patchify`): [B, N, P*P*C], each patch's pixels row by row,
  and within a pixel its C channels (MAE's layout).
- **keep** [B, n] long: the grid indices of the patches kept (visible), ascending per
  image; **mask** [B, N] bool: True where a patch is masked (not kept).
"""
import math
import zlib

import torch


def check_mask_ratio(ratio, name='mask_ratio'):
    """``ratio`` must lie strictly between 0 and 1 (ValueError naming the value)."""
    if not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        raise ValueError(f'{name} must be in (0, 1) (the fraction of patches masked per '
                         f'image), got {ratio!r}')


def num_kept(num_patches, mask_ratio):
    """Patches left visible per image: ``round(N * (1 - mask_ratio))``."""
    return round(num_patches * (1 - mask_ratio))


def check_patch_grid(img_size, patch_size, what):
    """An ``img_size`` that is not a whole grid of ``patch_size`` patches, or a grid of fewer
    than two patches, cannot be masked: ValueError naming the sizes and the grid.

    Returns:
        tuple[int, int]: the grid (h, w).
    """
    H, W = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    if H % patch_size or W % patch_size:
        raise ValueError(f'{what}: img_size {H}x{W} is not a whole grid of {patch_size}x'
                         f'{patch_size} patches (a {H / patch_size:g} x {W / patch_size:g} '
                         f'grid); choose an image size that is a multiple of patch_size')
    grid = (H // patch_size, W // patch_size)
    check_grid_count(grid, what)
    return grid


def check_grid_count(grid_hw, what):
    if grid_hw[0] * grid_hw[1] < 2:
        raise ValueError(f'{what}: a {grid_hw[0]}x{grid_hw[1]} patch grid has '
                         f'{grid_hw[0] * grid_hw[1]} patch; masking needs at least 2')


def check_maskable(grid_hw, mask_ratio, what, name='mask_ratio'):
    """At least one patch must stay visible and at least one be masked (ValueError naming
    the ratio and the grid otherwise)."""
    check_grid_count(grid_hw, what)
    n = grid_hw[0] * grid_hw[1]
    kept = num_kept(n, mask_ratio)
    if not 0 < kept < n:
        raise ValueError(f'{what}: {name}={mask_ratio} on a {grid_hw[0]}x{grid_hw[1]} patch '
                         f'grid keeps {kept} of {n} patches; at least one must be kept and '
                         f'one masked')


def patchify(img, patch_size):
    """img [B, C, h*P, w*P] -> patch vectors [B, h*w, P*P*C] (see the module doc)."""
    B, C, H, W = img.shape
    P = patch_size
    h, w = H // P, W // P
    x = img.reshape(B, C, h, P, w, P).permute(0, 2, 4, 3, 5, 1)  # [B, h, w, P, P, C]
    return x.reshape(B, h * w, P * P * C)


def unpatchify(x, patch_size, grid_hw, channels=3):
    """Patch vectors [B, h*w, P*P*C] -> img [B, C, h*P, w*P]; the inverse of :func:`patchify`."""
    B = x.shape[0]
    (h, w), P = grid_hw, patch_size
    x = x.reshape(B, h, w, P, P, channels).permute(0, 5, 1, 3, 2, 4)  # [B, C, h, P, w, P]
    return x.reshape(B, channels, h * P, w * P)


def noise_masking(noise, num_keep):
    """Per-image uniform noise [B, N] -> (keep [B, num_keep], mask [B, N]).

    The ``num_keep`` patches of lowest noise stay visible (MAE's argsort of random
    noise: each image its own uniformly random subset of exactly ``num_keep``).
    """
    keep = noise.argsort(dim=1)[:, :num_keep].sort(dim=1).values
    mask = torch.ones_like(noise, dtype=torch.bool).scatter(1, keep, False)
    return keep, mask


def random_masking(batch, num_patches, mask_ratio, generator=None, device=None):
    """A random mask per image: (keep [B, n], mask [B, N]) with n = ``num_kept(N, ratio)``.

    The same ``generator`` state gives the same masks.
    """
    noise = torch.rand(batch, num_patches, generator=generator, device=device)
    return noise_masking(noise, num_kept(num_patches, mask_ratio))


def sample_seed(data_sample, index, seed):
    """A seed of its own for one evaluation image: ``seed`` mixed with its ``img_path``
    (else its position in the batch), so an image gets the same mask at every validation
    whatever the batch it comes in."""
    path = data_sample.metainfo.get('img_path') if data_sample is not None else None
    key = zlib.crc32(str(path).encode()) if path is not None else index
    return (seed * 1_000_003 + key) % (2 ** 63)


def per_image_draws(draw, data_samples, batch, seed, device):
    """Concatenate ``draw(1, generator)`` (a dict of [1, ...] tensors) over the images of a
    batch, each with its own generator seeded by :func:`sample_seed`: the random draws
    of evaluation, the same for an image at every validation."""
    parts = []
    for i in range(batch):
        ds = data_samples[i] if data_samples is not None else None
        g = torch.Generator().manual_seed(sample_seed(ds, i, seed))
        parts.append(draw(1, g))
    return {k: torch.cat([p[k] for p in parts]).to(device) for k in parts[0]}


def block_mask(grid_hw, num_masking_patches, rng, min_num_patches=16, max_num_patches=None,
               min_aspect=0.3, max_aspect=None):
    """BEiT's blockwise mask of one image (Bao et al. 2022, Algorithm 1; ``MaskingGenerator`` of
    BEiT's code): rectangles of patches are added until about ``num_masking_patches`` are
    masked.

    Each step draws a target area ``s`` uniformly in [``min_num_patches``, what is left to
    mask] (BEiT: 16 and 75 of 196) and an aspect ratio ``r`` log-uniformly in
    [``min_aspect``, ``max_aspect``] (default ``1 / min_aspect``; BEiT: [0.3, 1/0.3]), takes the
    block ``round(sqrt(s r))`` rows by ``round(sqrt(s / r))`` columns (smaller than the grid
    on both sides) at a uniformly random place, and masks it if it adds at least one new
    patch and no more than are left to mask; 10 tries per step. The mask never exceeds
    ``num_masking_patches``; as in BEiT, it stops short when a step's 10 tries add nothing
    (the last few patches: a block must add no more than are left). Unlike BEiT, an image
    whose first step adds nothing is tried again (up to 100 times), so that no image is
    left without a masked patch.

    Args:
        grid_hw (tuple[int, int]): the patch grid (h, w).
        num_masking_patches (int): the target count.
        rng (random.Random): the draws (BEiT draws with Python's ``random`` too).

    Returns:
        [h, w] bool tensor, True where masked.
    """
    h, w = grid_hw
    max_num = num_masking_patches if max_num_patches is None else max_num_patches
    log_aspect = (math.log(min_aspect), math.log(max_aspect or 1 / min_aspect))
    mask = torch.zeros(h, w, dtype=torch.bool)

    def add_block(limit):
        for _ in range(10):
            area = rng.uniform(min_num_patches, limit)
            aspect = math.exp(rng.uniform(*log_aspect))
            bh, bw = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if bw < w and bh < h:
                top, left = rng.randint(0, h - bh), rng.randint(0, w - bw)
                block = mask[top:top + bh, left:left + bw]
                new = bh * bw - int(block.sum())
                if 0 < new <= limit:
                    block.fill_(True)
                    return new
        return 0

    count = 0
    for _ in range(100):  # the first block (BEiT gives up after 10 tries)
        count = add_block(min(num_masking_patches, max_num))
        if count:
            break
    while 0 < count < num_masking_patches:
        added = add_block(min(num_masking_patches - count, max_num))
        if not added:
            break
        count += added
    return mask
