"""Panoptic quality by the COCO panoptic rule (Kirillov et al., 2019), as pure functions.

One image: a ground-truth and a predicted map of segment ids (0 = void, unlabelled),
each id with a contiguous class 0..K-1 (and, for ground truth, a crowd flag). With
``|s|`` a segment's pixel count and ``void(p)`` the pixels of ``p`` on void ground truth:

- ``g`` and ``p`` match when they have the same class, ``g`` is not crowd and
  ``IoU = |g & p| / (|g| + |p| - |g & p| - void(p)) > 0.5`` (strictly: exactly 0.5 is
  no match). Above 0.5 a segment can match at most one other.
- a match is a true positive of its class, adding its IoU; an unmatched non-crowd
  ``g`` is a false negative; crowd segments are never matched nor missed.
- an unmatched ``p`` is a false positive unless more than half of it lies on void or
  on crowd segments of its own class.

Summed over the dataset per class c: ``PQ_c = sum IoU / (TP + FP/2 + FN/2)``,
``SQ_c = sum IoU / TP`` (0 without TP), ``RQ_c = TP / (TP + FP/2 + FN/2)``, so
``PQ_c = SQ_c * RQ_c``. PQ / SQ / RQ of all classes, things and stuff are the means over
the classes with ``TP + FP + FN > 0``: a class absent from both ground truth and
prediction is left out (its per-class values are NaN). Values are in percent.

Each image's intersections come from one joint histogram of (ground-truth segment,
predicted segment) pixel pairs, and the rule is applied to the small
segments x segments matrix, with no loop over pixels.
"""
import numpy as np

# columns of the per-class statistics array
IOU, TP, FP, FN = range(4)
GROUPS = (('All', ''), ('Things', '_th'), ('Stuff', '_st'))


def _index(ids, segment_ids, what):
    """Position of each pixel's id in ``[0] + segment_ids`` (void first)."""
    keys = np.concatenate([[0], segment_ids]).astype(np.int64)
    pos = np.searchsorted(keys, ids)
    pos = np.minimum(pos, len(keys) - 1)
    unknown = keys[pos] != ids
    if unknown.any():
        bad = sorted(set(ids[unknown].tolist()))
        raise ValueError(f'{what} ids {bad[:10]} are in the map but not among its segments '
                         f'{segment_ids.tolist()[:20]} (0 = void)')
    return pos


def _segments(segments, what):
    """``{id: value}`` -> sorted ids, values; id 0 (void) may not be a segment."""
    ids = np.array(sorted(segments), dtype=np.int64)
    if len(ids) and ids[0] <= 0:
        raise ValueError(f'{what} segment ids must be positive (0 is void), got {ids[0]}')
    return ids, [segments[i] for i in ids.tolist()]


def pq_stats(gt_ids, gt_segments, pred_ids, pred_segments, num_classes):
    """Per-class IoU sum, TP, FP and FN of one image.

    Args:
        gt_ids, pred_ids (array-like): integer maps ``[H, W]`` of segment ids, 0 = void.
        gt_segments (dict): ground-truth id -> ``(label, iscrowd)``.
        pred_segments (dict): predicted id -> label. A listed id with no pixel is not
            a prediction and counts nowhere.
        num_classes (int): K; labels are 0..K-1.

    Returns:
        np.ndarray: float64 ``[K, 4]``: columns IOU, TP, FP, FN.
    """
    gt_ids = np.asarray(gt_ids, dtype=np.int64)
    pred_ids = np.asarray(pred_ids, dtype=np.int64)
    if gt_ids.shape != pred_ids.shape:
        raise ValueError(f'ground truth {gt_ids.shape} and prediction {pred_ids.shape} '
                         'differ in size')
    g_ids, g_info = _segments(gt_segments, 'ground-truth')
    p_ids, p_labels = _segments(pred_segments, 'predicted')
    g_labels = np.array([label for label, _ in g_info], dtype=np.int64)
    g_crowd = np.array([bool(crowd) for _, crowd in g_info], dtype=bool)
    p_labels = np.array(p_labels, dtype=np.int64)
    for what, labels in (('ground-truth', g_labels), ('predicted', p_labels)):
        if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
            bad = sorted(set(labels[(labels < 0) | (labels >= num_classes)].tolist()))
            raise ValueError(f'{what} segment labels {bad} are not classes 0..{num_classes - 1}')

    gi = _index(gt_ids.ravel(), g_ids, 'ground-truth')
    pi = _index(pred_ids.ravel(), p_ids, 'predicted')
    n_p = len(p_ids) + 1
    joint = np.bincount(gi * n_p + pi, minlength=(len(g_ids) + 1) * n_p)
    joint = joint.reshape(len(g_ids) + 1, n_p)  # row / column 0: void
    inter = joint[1:, 1:]                        # [G, P] pixels of both segments
    p_void = joint[0, 1:]                        # pixels of each prediction on void
    g_area, p_area = joint[1:].sum(1), joint[:, 1:].sum(0)
    union = g_area[:, None] + p_area[None, :] - inter - p_void[None, :]
    same = g_labels[:, None] == p_labels[None, :]
    # 2 * inter > union <=> IoU > 0.5 in exact integer arithmetic
    match = same & ~g_crowd[:, None] & (2 * inter > union)
    mg, mp = np.nonzero(match)

    stats = np.zeros((num_classes, 4), dtype=np.float64)
    stats[:, IOU] = np.bincount(g_labels[mg], weights=inter[mg, mp] / union[mg, mp],
                                minlength=num_classes)
    stats[:, TP] = np.bincount(g_labels[mg], minlength=num_classes)
    missed = ~g_crowd & ~match.any(1)
    stats[:, FN] = np.bincount(g_labels[missed], minlength=num_classes)
    ignored = p_void + (inter * (same & g_crowd[:, None])).sum(0)
    false = ~match.any(0) & (p_area > 0) & ~(2 * ignored > p_area)
    stats[:, FP] = np.bincount(p_labels[false], minlength=num_classes)
    return stats


def pq_results(stats, isthing):
    """Dataset totals -> PQ / SQ / RQ per class and of all classes, things and stuff.

    Args:
        stats (array-like): ``[K, 4]`` per-class totals (:func:`pq_stats` summed).
        isthing (sequence of bool): K flags, thing (True) or stuff (False).

    Returns:
        dict: ``per_class``: dict of ``PQ``, ``SQ``, ``RQ`` arrays ``[K]`` (percent, NaN
        for a class absent from ground truth and prediction) and ``n`` (bool ``[K]``:
        counted); ``All`` / ``Things`` / ``Stuff``: dict of ``PQ``, ``SQ``, ``RQ`` (NaN
        when the group counts no class) and ``n`` (the classes counted).
    """
    stats = np.asarray(stats, dtype=np.float64)
    isthing = np.asarray(isthing, dtype=bool)
    if isthing.shape != (len(stats),):
        raise ValueError(f'isthing has {isthing.size} flags for {len(stats)} classes')
    iou, tp, fp, fn = stats.T
    den = tp + 0.5 * fp + 0.5 * fn
    counted = den > 0
    with np.errstate(divide='ignore', invalid='ignore'):
        per_class = dict(PQ=np.where(counted, 100 * iou / den, np.nan),
                         SQ=np.where(counted, np.where(tp > 0, 100 * iou / tp, 0.0), np.nan),
                         RQ=np.where(counted, 100 * tp / den, np.nan))
    results = dict(per_class=dict(per_class, n=counted))
    for name, group in (('All', np.ones_like(isthing)), ('Things', isthing),
                        ('Stuff', ~isthing)):
        keep = counted & group
        n = int(keep.sum())
        results[name] = {k: float(v[keep].mean()) if n else float('nan')
                         for k, v in per_class.items()}
        results[name]['n'] = n
    return results


def pq_metrics(results):
    """:func:`pq_results` -> flat keys ``PQ``, ``SQ``, ``RQ``, ``PQ_th`` ... ``RQ_st``
    (MMDetection's names)."""
    return {f'{k}{suffix}': results[group][k]
            for group, suffix in GROUPS for k in ('PQ', 'SQ', 'RQ')}


def _rows_table(header, rows):
    """First column left-aligned, the others right-aligned, each as wide as it needs."""
    rows = [[str(v) for v in r] for r in [header] + rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return '\n'.join('  '.join(v.ljust(w) if i == 0 else v.rjust(max(w, 6))
                                for i, (v, w) in enumerate(zip(r, widths, strict=True)))
                      for r in rows)


def _fmt(value):
    return 'nan' if value != value else f'{value:.2f}'


def summary_table(metrics):
    """Fixed-width table of PQ / SQ / RQ for all classes, things and stuff, from
    flat keys (:func:`pq_metrics`, with or without an evaluator prefix such as
    ``coco_panoptic/``); ``None`` when ``metrics`` has no PQ."""
    keys = {k.rsplit('/', 1)[-1]: v for k, v in metrics.items()}
    if 'PQ' not in keys:
        return None
    rows = [[group] + [_fmt(float(keys.get(f'{k}{suffix}', float('nan'))))
                       for k in ('PQ', 'SQ', 'RQ')]
            for group, suffix in GROUPS]
    return _rows_table(['', 'PQ', 'SQ', 'RQ'], rows)


def class_table(results, names, isthing):
    """Fixed-width per-class table (thing / stuff, PQ, SQ, RQ; '-' for a class absent
    from ground truth and prediction), then the all / things / stuff rows with their
    class counts."""
    per_class = results['per_class']
    rows = []
    for i, name in enumerate(names):
        kind = 'thing' if isthing[i] else 'stuff'
        values = ([_fmt(per_class[k][i]) for k in ('PQ', 'SQ', 'RQ')]
                  if per_class['n'][i] else ['-'] * 3)
        rows.append([str(name), kind] + values)
    for group, _ in GROUPS:
        rows.append([group, f"{results[group]['n']} classes"]
                    + [_fmt(results[group][k]) for k in ('PQ', 'SQ', 'RQ')])
    return _rows_table(['class', 'kind', 'PQ', 'SQ', 'RQ'], rows)
