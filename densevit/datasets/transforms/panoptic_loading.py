"""Loading COCO panoptic annotations: the PNG of segment ids, checked against its image and
its ``segments_info``, into the targets of panoptic, semantic and instance segmentation."""
import cv2
import numpy as np
from mmcv.transforms import BaseTransform
from mmengine import fileio

from densevit.datasets.masks import masks_to_boxes
from densevit.datasets.transforms.loading import DataError, mark_original_size
from densevit.registry import TRANSFORMS
from densevit.structures.panoptic import INSTANCE_OFFSET, rgb_to_id

SHOW_IDS = 10  # segment ids listed in an error
IGNORE_INDEX = 255  # VOID in gt_seg_map


def _ids(values):
    values = sorted(int(v) for v in values)
    return ', '.join(map(str, values[:SHOW_IDS])) + (' ...' if len(values) > SHOW_IDS else '')


def read_panoptic_png(path, backend_args=None):
    """int32 [H, W] segment ids of a COCO panoptic PNG (``R + 256 G + 256^2 B``, 0 VOID).

    FileNotFoundError or DataError naming the file: missing, undecodable, or not an
    8-bit 3-channel image (a one-channel PNG is likely a semantic label map)."""
    try:
        data = fileio.get(path, backend_args=backend_args)
    except FileNotFoundError:
        raise FileNotFoundError(f'panoptic PNG not found: {path}') from None
    png = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if png is None:
        raise DataError(f'cannot decode panoptic PNG: {path} (corrupt or not an image)')
    if png.ndim != 3 or png.shape[2] != 3 or png.dtype != np.uint8:
        channels = 1 if png.ndim == 2 else png.shape[2]
        raise DataError(f'panoptic PNG {path} has {channels} channel(s) of {png.dtype}: '
                        'expected 8-bit RGB, each colour a segment id (id = R + 256 G + '
                        '256^2 B)')
    return rgb_to_id(png[..., ::-1])  # OpenCV decodes BGR


def panoptic_png_problems(ids, results):
    """Lines naming the PNG for what does not match: its size against the image's
    (``ori_shape`` when loaded, else the annotation's height / width), the ids of its
    ``segments_info`` absent from it, and ids in it that ``segments_info`` does not list."""
    path, problems = results['seg_map_path'], []
    size = results.get('ori_shape') or (results.get('height'), results.get('width'))
    if None not in size and tuple(ids.shape) != tuple(size[:2]):
        problems.append(f'panoptic PNG {path} is {ids.shape[0]}x{ids.shape[1]} (HxW) but its '
                        f'image {results.get("img_path")} is {size[0]}x{size[1]}')
    listed = {s['id'] for s in results['segments_info']}
    present = set(np.unique(ids).tolist()) - {0}
    if listed - present:
        problems.append(f'panoptic PNG {path}: segment ids {_ids(listed - present)} of its '
                        'segments_info are absent from the PNG')
    if present - listed:
        problems.append(f'panoptic PNG {path} holds segment ids {_ids(present - listed)} that '
                        'its segments_info does not list (0 is VOID)')
    return problems


def panoptic_targets(ids, segments_info, num_classes):
    """Targets of a PNG's ``ids`` whose every non-zero id is in ``segments_info``.

    Returns a dict: ``gt_panoptic_seg`` int32 [H, W] (``label + instance *
    INSTANCE_OFFSET``: stuff and crowd regions instance 0, the non-crowd thing segments
    1, 2, ... in ``segments_info`` order; VOID ``num_classes``), ``gt_seg_map`` [H, W]
    (labels, VOID 255; uint8 when the labels fit, else int32), and for the thing
    segments (crowd included) in ``segments_info`` order ``gt_masks`` bool [N, H, W],
    ``gt_bboxes`` float32 [N, 4] (the masks' pixel extents), ``gt_bboxes_labels`` int64
    [N], ``gt_ignore_flags`` bool [N] (True for crowd).
    """
    order = sorted(range(len(segments_info)), key=lambda k: segments_info[k]['id'])
    keys = np.array([0] + [segments_info[k]['id'] for k in order], np.int64)
    pos = np.searchsorted(keys, ids) - 1  # -1: VOID, else the position in ``order``
    pan_values, instance = [], 0
    for s in segments_info:
        own = s['is_thing'] and not s['iscrowd']
        instance += own
        pan_values.append(s['category'] + (instance * INSTANCE_OFFSET if own else 0))
    pan_lut = np.array([num_classes] + [pan_values[k] for k in order], np.int32)
    sem_lut = np.array([IGNORE_INDEX] + [segments_info[k]['category'] for k in order], np.int32)
    things = [k for k, s in enumerate(segments_info) if s['is_thing']]
    where = {k: i for i, k in enumerate(order)}
    masks = np.stack([pos == where[k] for k in things]) if things else np.zeros(
        (0, *ids.shape), bool)
    sem = sem_lut[pos + 1]
    return dict(
        gt_panoptic_seg=pan_lut[pos + 1],
        gt_seg_map=sem.astype(np.uint8) if num_classes <= IGNORE_INDEX else sem,
        gt_masks=masks, gt_bboxes=masks_to_boxes(masks),
        gt_bboxes_labels=np.array([segments_info[k]['category'] for k in things], np.int64),
        gt_ignore_flags=np.array([segments_info[k]['iscrowd'] for k in things], bool))


@TRANSFORMS.register_module()
class LoadPanopticAnnotations(BaseTransform):
    """Read ``results['seg_map_path']`` (a COCO panoptic PNG) with its ``segments_info``
    (see CocoPanopticDataset) into panoptic, semantic and instance targets.

    The PNG must have the image's size (``ori_shape``, so it may come after a test-time
    Resize and stay at the original size) and hold exactly the ids of ``segments_info``
    (besides 0, VOID); otherwise a :class:`DataError` names the PNG and the ids (a missing
    PNG: FileNotFoundError naming it).

    Adds (see :func:`panoptic_targets`): with ``with_bbox`` ``gt_bboxes``,
    ``gt_bboxes_labels``, ``gt_ignore_flags`` (thing segments; crowd ones flagged, so
    they are packed as ``ignored_instances``: MMDetection leaves them out); with
    ``with_mask`` ``gt_masks``; with ``with_seg`` ``gt_seg_map`` (VOID 255; crowd
    pixels keep their class, as MMDetection's) and ``gt_panoptic_seg`` (VOID
    ``num_classes``, also set as ``panoptic_void``).

    Args:
        with_bbox, with_mask, with_seg (bool): which targets to add (MMDetection's names).
        backend_args (dict, optional): mmengine fileio backend.
    """

    def __init__(self, with_bbox=True, with_mask=True, with_seg=True, backend_args=None):
        self.with_bbox, self.with_mask, self.with_seg = with_bbox, with_mask, with_seg
        self.backend_args = backend_args

    def transform(self, results):
        ids = read_panoptic_png(results['seg_map_path'], self.backend_args)
        problems = panoptic_png_problems(ids, results)
        if problems:
            raise DataError('; '.join(problems))
        targets = panoptic_targets(ids, results['segments_info'], results['num_classes'])
        keys = ((('gt_bboxes', 'gt_bboxes_labels', 'gt_ignore_flags') if self.with_bbox else ())
                + (('gt_masks',) if self.with_mask else ())
                + (('gt_seg_map', 'gt_panoptic_seg') if self.with_seg else ()))
        results.update({k: targets[k] for k in keys})
        mark_original_size(results, ids.shape)
        if self.with_seg:
            results['panoptic_void'] = results['num_classes']
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(with_bbox={self.with_bbox}, '
                f'with_mask={self.with_mask}, with_seg={self.with_seg})')
