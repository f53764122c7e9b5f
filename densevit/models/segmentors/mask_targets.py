"""Ground truth as a set of (class, binary mask) pairs, what mask classification (MaskFormer,
Mask2Former, EoMT) is trained on.

- Semantic segmentation: one mask per class present in the label map (ignored pixels in
  none), as Mask2Former turns a semantic label into mask-classification targets.
- Panoptic segmentation: one mask per segment of ``gt_panoptic_seg`` (``label + instance *
  INSTANCE_OFFSET`` per pixel, :mod:`densevit.structures.panoptic`): each thing instance and
  each stuff class present; VOID pixels (a label of ``num_classes`` or more) in none.
- Instance data in MMDetection's convention: each ``gt_instances`` entry (a "thing":
  ``labels``, ``masks``) is one target, and, given ``num_things_classes``, the "stuff"
  classes of ``gt_sem_seg`` (ids ``num_things_classes`` and up, not ``ignore_index``) one
  target each, as MMDetection's Mask2Former builds its panoptic targets.
"""
import torch
import torch.nn.functional as F

from densevit.structures.panoptic import INSTANCE_OFFSET


def _masks_tensor(masks):
    """Instance masks as a [N, H, W] bool tensor: a tensor, an array, or MMDetection-style
    ``BitmapMasks`` (``to_tensor`` / ``masks``)."""
    if hasattr(masks, 'to_tensor'):
        masks = masks.to_tensor(dtype=torch.bool, device='cpu')
    elif hasattr(masks, 'masks'):
        masks = masks.masks
    return torch.as_tensor(masks).bool()


def class_masks(label, classes):
    """label [H, W] -> [len(classes), H, W] bool, mask k where ``label == classes[k]``."""
    return label[None] == classes[:, None, None]


def semantic_targets(label, ignore_index=255, min_class=0):
    """A label map [H, W] -> dict(labels [N] long, masks [N, H, W] bool): one target per class
    present, in increasing order, ``ignore_index`` and classes below ``min_class`` left out."""
    classes = label.unique()
    classes = classes[(classes != ignore_index) & (classes >= min_class)].long()
    return dict(labels=classes, masks=class_masks(label, classes))


def panoptic_targets(ids, num_classes):
    """A panoptic map [H, W] (``label + instance * INSTANCE_OFFSET``) -> dict(labels [N],
    masks [N, H, W] bool): one target per segment in increasing id order, VOID (a label of
    ``num_classes`` or more) left out."""
    values = ids.unique()
    values = values[values % INSTANCE_OFFSET < num_classes]
    return dict(labels=(values % INSTANCE_OFFSET).long(), masks=class_masks(ids, values))


def mask_targets(data_samples, shape, device, num_classes, ignore_index=255,
                 num_things_classes=None):
    """The targets of a batch, all masks of the batch's size ``shape`` (H, W).

    Args:
        data_samples (list[DataSample]): per image ``gt_panoptic_seg`` [1, H, W], else
            ``gt_instances`` with ``labels`` and ``masks``, else ``gt_sem_seg`` [1, H, W] (the
            data preprocessor pads it with ``ignore_index``); maps and masks smaller than
            ``shape`` are padded here at the bottom / right (with VOID, zeros).
        shape (tuple[int, int]): the padded batch size.
        device: where the targets go.
        num_classes (int): K (a panoptic label of K or more is VOID).
        ignore_index (int): the label of unlabelled pixels.
        num_things_classes (int, optional): with ``gt_instances``: the classes below it are
            things (from the instances), those from it on stuff (from ``gt_sem_seg``); None:
            every class of ``gt_sem_seg`` is a target (semantic).

    Returns:
        list[dict]: per image ``labels`` [N_i] long and ``masks`` [N_i, H, W] bool.
    """
    targets = []
    for ds in data_samples:
        panoptic = ds.get('gt_panoptic_seg')
        if panoptic is not None:
            ids = panoptic.data[0].to(device)
            h, w = ids.shape
            ids = F.pad(ids, (0, shape[1] - w, 0, shape[0] - h), value=num_classes)
            targets.append(panoptic_targets(ids, num_classes))
            continue
        instances = ds.get('gt_instances')
        has_masks = instances is not None and 'masks' in instances
        sem = ds.get('gt_sem_seg')
        labels, masks = [], []
        if has_masks:
            inst = _masks_tensor(instances.masks)
            h, w = inst.shape[-2:]
            inst = F.pad(inst, (0, shape[1] - w, 0, shape[0] - h))
            labels.append(torch.as_tensor(instances.labels).long())
            masks.append(inst)
        if sem is not None and (not has_masks or num_things_classes is not None):
            stuff = semantic_targets(sem.data[0].to(device), ignore_index,
                                     num_things_classes if has_masks else 0)
            labels.append(stuff['labels'])
            masks.append(stuff['masks'])
        if not labels:
            raise ValueError('mask_targets: a data sample has neither gt_sem_seg nor '
                             'gt_instances with masks')
        labels = torch.cat([t.to(device) for t in labels])
        masks = torch.cat([m.to(device) for m in masks])
        if tuple(masks.shape[-2:]) != tuple(shape):
            raise ValueError(f'mask_targets: target masks of size {tuple(masks.shape[-2:])} '
                             f'for a batch of {tuple(shape)}; pad the label maps to the batch '
                             f'size (SegDataPreprocessor does)')
        targets.append(dict(labels=labels, masks=masks))
    return targets
