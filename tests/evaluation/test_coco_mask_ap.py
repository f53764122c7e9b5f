"""CocoMetric(metric='segm') against pycocotools' COCOeval(iouType='segm') called
directly on the same RLEs: equal to the last digit; a perfect prediction scores 1.0."""
import contextlib
import io
import json

import numpy as np
import pytest
import torch
from pycocotools import mask as mask_util
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from test_coco_metric import run, samples  # the box tests' helpers

from densevit.datasets.transforms.loading import DataError
from densevit.evaluation.coco_metric import CocoMetric

H, W = 96, 128
CAT_IDS = [2, 5, 8]
SEGM_KEYS = ['segm_mAP', 'segm_mAP_50', 'segm_mAP_75', 'segm_mAP_s', 'segm_mAP_m',
             'segm_mAP_l']


def polygon(rng, size):
    """A random polygon inside the image: a jittered ellipse (COCO area small or
    medium) or, for 'large', a jittered quadrilateral over most of the image."""
    if size == 'large':
        corners = np.array([[4, 4], [W - 5, 4], [W - 5, H - 5], [4, H - 5]], dtype=float)
        return (corners + rng.uniform(-3, 3, corners.shape)).ravel().tolist()
    r = dict(small=(4, 14), medium=(22, 34))[size]
    cx, cy = rng.uniform(r[1], W - r[1]), rng.uniform(r[1], H - r[1])
    rx, ry = rng.uniform(*r), rng.uniform(*r)
    t = np.sort(rng.uniform(0, 2 * np.pi, 9))
    x = np.clip(cx + rx * np.cos(t) * rng.uniform(0.8, 1, 9), 0, W - 1)
    y = np.clip(cy + ry * np.sin(t) * rng.uniform(0.8, 1, 9), 0, H - 1)
    return np.stack([x, y], 1).ravel().tolist()


def make_gt():
    """5 images of polygons (COCO's small, medium and large areas), a crowd RLE, an
    image without annotations."""
    rng = np.random.default_rng(0)
    images = [dict(id=i, file_name=f'{i}.jpg', width=W, height=H) for i in (4, 9, 10, 15, 30)]
    anns = []
    for img_id in (4, 9, 10, 15):
        sizes = ['small'] * int(rng.integers(2, 5)) + ['medium'] * int(rng.integers(1, 3))
        for size in sizes + (['large'] if img_id in (4, 15) else []):
            poly = polygon(rng, size)
            rle = mask_util.frPyObjects([poly], H, W)
            anns.append(dict(image_id=img_id, category_id=int(rng.choice(CAT_IDS)),
                             segmentation=[poly], iscrowd=0,
                             area=float(mask_util.area(mask_util.merge(rle))),
                             bbox=mask_util.toBbox(mask_util.merge(rle)).tolist()))
    crowd = np.zeros((H, W), dtype=np.uint8)
    crowd[60:90, 10:50] = 1
    rle = mask_util.encode(np.asfortranarray(crowd))
    anns.append(dict(image_id=9, category_id=5, iscrowd=1, area=float(crowd.sum()),
                     segmentation=dict(size=[H, W], counts=rle['counts'].decode()),
                     bbox=[10.0, 60.0, 40.0, 30.0]))
    for i, ann in enumerate(anns):
        ann['id'] = i + 1
    return dict(images=images, annotations=anns,
                categories=[dict(id=c, name=f'c{c}') for c in CAT_IDS])


def gt_masks(coco):
    """Per image: (masks [N, H, W] bool, labels) of its non-crowd annotations."""
    label_of = {c: i for i, c in enumerate(sorted(CAT_IDS))}
    out = {}
    for img_id in coco.getImgIds():
        anns = [a for a in coco.imgToAnns[img_id] if not a['iscrowd']]
        masks = np.array([coco.annToMask(a) for a in anns], dtype=bool).reshape(-1, H, W)
        out[img_id] = (masks, [label_of[a['category_id']] for a in anns])
    return out


def make_preds(coco):
    """Shifted ground-truth masks (some relabelled, some dropped) and spurious blobs."""
    rng = np.random.default_rng(1)
    preds = {}
    for img_id, (masks, labels) in gt_masks(coco).items():
        out_masks, out_labels = [], []
        for mask, label in zip(masks, labels, strict=True):
            if rng.random() < 0.15:
                continue
            shift = rng.integers(-3, 4, size=2)
            out_masks.append(np.roll(mask, tuple(shift), axis=(0, 1)))
            out_labels.append(label if rng.random() > 0.2 else int(rng.integers(3)))
        for _ in range(int(rng.integers(0, 3))):
            blob = np.zeros((H, W), dtype=bool)
            y, x = rng.integers(0, H - 20), rng.integers(0, W - 20)
            blob[y:y + int(rng.integers(3, 20)), x:x + int(rng.integers(3, 20))] = True
            out_masks.append(blob)
            out_labels.append(int(rng.integers(3)))
        n = len(out_masks)
        preds[img_id] = dict(masks=torch.from_numpy(np.array(out_masks, dtype=bool)
                                                     .reshape(n, H, W)),
                             scores=torch.tensor(rng.random(n), dtype=torch.float32),
                             labels=torch.tensor(out_labels, dtype=torch.long).reshape(n),
                             bboxes=torch.zeros(n, 4))
    return preds


def reference_stats(ann_file, preds):
    """pycocotools directly: each mask RLE-encoded by pycocotools, no box in the result."""
    ids = sorted(CAT_IDS)
    dets = []
    for img_id, p in preds.items():
        for mask, score, label in zip(p['masks'].numpy(), p['scores'].tolist(),
                                      p['labels'].tolist(), strict=True):
            rle = mask_util.encode(np.asfortranarray(mask.astype(np.uint8)))
            rle['counts'] = rle['counts'].decode()
            dets.append(dict(image_id=img_id, category_id=ids[label], score=score,
                             segmentation=rle))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(ann_file)
        ev = COCOeval(gt, gt.loadRes(dets), 'segm')
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return dict(zip(SEGM_KEYS, ev.stats[:6].tolist(), strict=True))


@pytest.fixture
def coco(tmp_path):
    ann_file = tmp_path / 'instances.json'
    ann_file.write_text(json.dumps(make_gt()))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_file))
    return str(ann_file), gt


def test_segm_matches_cocoeval(coco):
    ann_file, gt = coco
    preds = make_preds(gt)
    got = run(CocoMetric(ann_file=ann_file, metric='segm', classwise=True), samples(preds))
    want = reference_stats(ann_file, preds)
    assert got == want  # exact
    assert 0 < got['segm_mAP'] < 1 and min(got.values()) > 0  # every area range scored


def test_bbox_and_segm_together(coco, tmp_path):
    ann_file, gt = coco
    preds = make_preds(gt)
    for p in preds.values():  # boxes around the masks
        p['bboxes'] = torch.tensor(np.array(
            [[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
             for ys, xs in (np.nonzero(m) for m in p['masks'].numpy())]).reshape(-1, 4),
            dtype=torch.float32)
    prefix = str(tmp_path / 'res')
    both = run(CocoMetric(ann_file=ann_file, metric=['bbox', 'segm'], outfile_prefix=prefix),
               samples(preds))
    bbox = run(CocoMetric(ann_file=ann_file), samples(preds))
    assert both == {**bbox, **reference_stats(ann_file, preds)}
    written = json.loads((tmp_path / 'res.segm.json').read_text())
    assert len(written) == sum(len(p['labels']) for p in preds.values())
    assert 'bbox' not in written[0] and written[0]['segmentation']['size'] == [H, W]


def test_perfect_masks_score_one(coco):
    ann_file, gt = coco
    preds = {}
    for img_id, (masks, labels) in gt_masks(gt).items():
        n = len(labels)
        preds[img_id] = dict(masks=torch.from_numpy(masks), scores=torch.ones(n),
                             labels=torch.tensor(labels, dtype=torch.long).reshape(n))
    got = run(CocoMetric(ann_file=ann_file, metric='segm'), samples(preds))
    assert got['segm_mAP'] == got['segm_mAP_50'] == got['segm_mAP_75'] == 1.0


def test_refusals(coco):
    ann_file, gt = coco
    preds = make_preds(gt)
    small = {k: dict(v, masks=v['masks'][:, :48]) for k, v in preds.items()}
    with pytest.raises(DataError, match=r'masks of image \d+ \(\d+\.jpg\) are 48x128.*96x128'):
        run(CocoMetric(ann_file=ann_file, metric='segm'), samples(small))
    soft = {k: dict(v, masks=v['masks'].float()) for k, v in preds.items()}
    with pytest.raises(TypeError, match='boolean'):
        run(CocoMetric(ann_file=ann_file, metric='segm'), samples(soft))
    no_masks = {k: {n: t for n, t in v.items() if n != 'masks'} for k, v in preds.items()}
    with pytest.raises(KeyError, match='masks'):
        run(CocoMetric(ann_file=ann_file, metric='segm'), samples(no_masks))
    for bad in ('proposal', [], ['bbox', 'bbox']):
        with pytest.raises(KeyError, match='segm'):
            CocoMetric(ann_file=ann_file, metric=bad)
