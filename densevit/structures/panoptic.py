"""Panoptic segment ids: the COCO PNG colour code and densevit's per-pixel panoptic map.

A COCO panoptic PNG stores one segment id per pixel as a colour,
``id = R + 256 * G + 256 ** 2 * B``; 0 (black) is VOID, an unlabelled pixel.

Inside densevit a panoptic map (``DataSample.gt_panoptic_seg`` / ``pred_panoptic_seg``)
holds ``label + instance * INSTANCE_OFFSET`` per pixel, MMDetection's encoding:
``label`` is the contiguous class (things first, then stuff), ``instance`` is 0 for
stuff and 1, 2, ... for the thing instances of an image. VOID pixels hold
``num_classes`` (instance 0), the value MMDetection's panoptic heads give them.
"""
import numpy as np

INSTANCE_OFFSET = 1000  # label = value % INSTANCE_OFFSET, instance = value // INSTANCE_OFFSET


def rgb_to_id(rgb):
    """uint8 [..., 3] RGB (channel order R, G, B) -> int32 [...] segment ids."""
    rgb = np.asarray(rgb)
    if rgb.shape[-1:] != (3,):
        raise ValueError(f'expected an RGB array [..., 3], got shape {rgb.shape}')
    rgb = rgb.astype(np.int32)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def id_to_rgb(ids):
    """Integer [...] segment ids (0 <= id < 256 ** 3) -> uint8 [..., 3] RGB."""
    ids = np.asarray(ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= 256 ** 3):
        raise ValueError(f'segment ids must lie in [0, {256 ** 3}), got {ids.min()}..{ids.max()}')
    return np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)
