"""CocoPanopticMetric against an independent implementation of the COCO panoptic rule,
cityscapesscripts' ``evalPanopticSemanticLabeling`` (a port of the COCO panoptic API),
run on the same ground-truth files and on the prediction files the metric writes.

The data: random panoptic images of 32x48 (stuff regions, thing instances, at most one
crowd region per thing class and image, as COCO's files have, void pixels) and
predictions made from them by moving, relabelling, dropping and adding segments.
"""
import contextlib
import io
import json

import numpy as np
import pytest
import torch
from cityscapesscripts.evaluation import evalPanopticSemanticLabeling as cs_eval
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData
from PIL import Image

from densevit.datasets.transforms.loading import DataError
from densevit.datasets.transforms.panoptic_loading import panoptic_targets, read_panoptic_png
from densevit.evaluation.coco_panoptic_metric import CocoPanopticMetric
from densevit.evaluation.panoptic_quality import pq_results, pq_stats
from densevit.registry import DATASETS, METRICS
from densevit.structures import DataSample
from densevit.structures.panoptic import INSTANCE_OFFSET, id_to_rgb, rgb_to_id

H, W = 32, 48
# category ids with gaps, things and stuff interleaved in the file; labels follow
# CocoPanopticDataset's order: things by ascending id, then stuff by ascending id
FILE_CATEGORIES = [dict(id=1, name='person', isthing=1), dict(id=2, name='sky', isthing=0),
                   dict(id=3, name='car', isthing=1), dict(id=5, name='road', isthing=0),
                   dict(id=8, name='bicycle', isthing=1), dict(id=12, name='tree', isthing=0),
                   dict(id=20, name='never', isthing=0)]  # in no image, predicted nowhere
CATEGORIES = ([c for c in FILE_CATEGORIES if c['isthing']]
              + [c for c in FILE_CATEGORIES if not c['isthing']])
CAT_IDS = [c['id'] for c in CATEGORIES]  # [1, 3, 8, 2, 5, 12, 20]
K = len(CATEGORIES)
THING_LABELS = [i for i, c in enumerate(CATEGORIES) if c['isthing']]
STUFF_LABELS = [i for i, c in enumerate(CATEGORIES) if not c['isthing'] and c['name'] != 'never']


def box(rng, min_side=4, max_side=20):
    h, w = rng.integers(min_side, max_side, size=2)
    y, x = rng.integers(0, H - h + 1), rng.integers(0, W - w + 1)
    return slice(y, y + h), slice(x, x + w)


def make_image(rng):
    """Label map (K = void) and instance map of one image: stuff bands, then things."""
    label = np.full((H, W), K, dtype=np.int64)
    inst = np.zeros((H, W), dtype=np.int64)
    for _ in range(3):
        label[box(rng, 10, 32)] = rng.choice(STUFF_LABELS)
    crowd = {}
    for i in range(1, int(rng.integers(3, 8))):
        cls = int(rng.choice(THING_LABELS))
        region = box(rng)
        label[region], inst[region] = cls, i
        if cls not in crowd and rng.random() < 0.3:
            crowd[cls] = i  # one crowd region per class, as in COCO's files
    label[box(rng, 2, 10)] = K  # void
    inst[label == K] = 0
    return label, inst, crowd


def write_gt(tmp_path, rng, n_images=6):
    """COCO panoptic JSON + PNG folder; returns (json path, folder, per-image maps)."""
    folder = tmp_path / 'gt_png'
    folder.mkdir()
    images, annotations, maps = [], [], {}
    for k in range(n_images):
        img_id = 100 + 7 * k
        label, inst, crowd = make_image(rng)
        # segment ids: a random id per (label, instance) pair; 0 stays void
        pairs = sorted(map(tuple, np.unique(np.stack([label, inst], -1)[label != K],
                                            axis=0).tolist()))
        seg_ids = rng.choice(np.arange(1, 256 ** 3), size=len(pairs), replace=False)
        ids = np.zeros((H, W), dtype=np.int64)
        segments = []
        for (cls, i), sid in zip(pairs, seg_ids.tolist(), strict=True):
            mask = (label == cls) & (inst == i)
            ids[mask] = sid
            ys, xs = np.nonzero(mask)
            segments.append(dict(id=sid, category_id=CAT_IDS[cls], area=int(mask.sum()),
                                 iscrowd=int(crowd.get(cls) == i and i > 0),
                                 bbox=[int(xs.min()), int(ys.min()), int(np.ptp(xs)) + 1,
                                       int(np.ptp(ys)) + 1]))
        name = f'{img_id:06d}.png'
        Image.fromarray(id_to_rgb(ids)).save(folder / name)
        images.append(dict(id=img_id, file_name=f'{img_id:06d}.jpg', width=W, height=H))
        annotations.append(dict(image_id=img_id, file_name=name, segments_info=segments))
        maps[img_id] = (label, inst)
    ann_file = tmp_path / 'panoptic_val.json'
    ann_file.write_text(json.dumps(dict(images=images, annotations=annotations,
                                        categories=FILE_CATEGORIES)))
    return str(ann_file), str(folder), maps


def make_prediction(rng, label, inst):
    """MMDetection's encoding: label + instance * INSTANCE_OFFSET, void = K."""
    label, inst = label.copy(), inst.copy()
    for i in np.unique(inst[inst > 0]):  # things: move, relabel or drop some
        mask = inst == i
        r = rng.random()
        if r < 0.15:
            label[mask], inst[mask] = K, 0
        elif r < 0.3:
            label[mask] = rng.choice(THING_LABELS)
        elif r < 0.6:
            cls = label[mask][0]
            dy, dx = rng.integers(-4, 5, size=2)
            moved = np.roll(mask, (dy, dx), axis=(0, 1))
            label[mask], inst[mask] = K, 0
            label[moved], inst[moved] = cls, i
    for _ in range(int(rng.integers(0, 3))):  # spurious things and stuff
        region = box(rng, 3, 12)
        if rng.random() < 0.5:
            label[region], inst[region] = rng.choice(THING_LABELS), 50 + int(rng.integers(9))
        else:
            label[region], inst[region] = rng.choice(STUFF_LABELS), 0
    label[box(rng, 1, 6)] = K
    inst[label == K] = 0
    inst[np.isin(label, STUFF_LABELS)] = 0
    return label + inst * INSTANCE_OFFSET


def samples(preds):
    out = []
    for img_id, pan in preds.items():
        s = DataSample(metainfo=dict(img_id=img_id, ori_shape=(H, W)))
        s.pred_panoptic_seg = PixelData(sem_seg=torch.from_numpy(pan)[None])
        out.append(s)
    return out


def run(metric, data_samples):
    metric.dataset_meta = dict(classes=tuple(c['name'] for c in CATEGORIES))
    metric.process({}, data_samples)
    return metric.compute_metrics(metric.results)


def cityscapes_pq(ann_file, gt_folder, pred_json, pred_folder):
    """cityscapesscripts' evaluation (its single-process worker and averaging)."""
    gt = json.load(open(ann_file))
    pred = {a['image_id']: a for a in json.load(open(pred_json))['annotations']}
    categories = {c['id']: c for c in gt['categories']}
    pairs = [(a, pred[a['image_id']]) for a in gt['annotations']]
    with contextlib.redirect_stdout(io.StringIO()):
        stat = cs_eval.pq_compute_single_core(0, pairs, gt_folder, pred_folder, categories)
    return cs_eval.average_pq(stat, categories), stat


@pytest.fixture(params=[0, 1, 2])
def data(request, tmp_path):
    rng = np.random.default_rng(request.param)
    ann_file, gt_folder, maps = write_gt(tmp_path, rng)
    preds = {img_id: make_prediction(rng, *m) for img_id, m in maps.items()}
    return ann_file, gt_folder, preds, tmp_path


def test_equals_cityscapesscripts(data):
    ann_file, gt_folder, preds, tmp_path = data
    prefix = str(tmp_path / 'out' / 'pred')
    metric = CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder, outfile_prefix=prefix)
    got = run(metric, samples(preds))
    want, stat = cityscapes_pq(ann_file, gt_folder, f'{prefix}.panoptic.json',
                               f'{prefix}.panoptic')
    for group, suffix in (('All', ''), ('Things', '_th'), ('Stuff', '_st')):
        for k in ('PQ', 'SQ', 'RQ'):
            assert abs(got[k + suffix] - 100 * want[group][k.lower()]) < 1e-6, (group, k)
    # per class: the same statistics; 'never' is absent from both and left out of the means
    assert want['All']['n'] == K - 1
    totals = np.sum([r['stats'] for r in metric.results], axis=0)
    per_class = pq_results(totals, [c['isthing'] for c in CATEGORIES])['per_class']
    for label, cat_id in enumerate(CAT_IDS):
        ref = stat[cat_id]
        assert totals[label, 1:].tolist() == [ref.tp, ref.fp, ref.fn]
        assert abs(totals[label, 0] - ref.iou) < 1e-9
        for k in ('PQ', 'SQ', 'RQ'):
            ref_value = 100 * want['per_class'][cat_id][k.lower()]
            if CATEGORIES[label]['name'] == 'never':  # the reference lists 0, uncounted
                assert np.isnan(per_class[k][label]) and ref_value == 0
            else:
                assert abs(per_class[k][label] - ref_value) < 1e-6, (cat_id, k)
    assert 0 < got['PQ'] < 100 and totals[:, 2].sum() > 0 and totals[:, 3].sum() > 0


def test_pure_function_equals_cityscapesscripts_per_image(data):
    """pq_stats on the files themselves (prediction PNGs written by the reference's
    conventions here, not by the metric)."""
    ann_file, gt_folder, preds, tmp_path = data
    pred_folder = tmp_path / 'pred_png'
    pred_folder.mkdir()
    gt = json.load(open(ann_file))
    pred_anns = []
    for ann in gt['annotations']:
        pan = preds[ann['image_id']]
        # the PNG ids: the MMDetection id + 1, so that label 0 instance 0 is not void
        ids = np.where(pan % INSTANCE_OFFSET == K, 0, pan + 1)
        Image.fromarray(id_to_rgb(ids)).save(pred_folder / ann['file_name'])
        segs = [dict(id=int(i), category_id=CAT_IDS[(int(i) - 1) % INSTANCE_OFFSET])
                for i in np.unique(ids) if i]
        pred_anns.append(dict(image_id=ann['image_id'], file_name=ann['file_name'],
                              segments_info=segs))
    (tmp_path / 'pred.json').write_text(json.dumps(dict(annotations=pred_anns)))
    label_of = {c: i for i, c in enumerate(CAT_IDS)}
    for gt_ann, pred_ann in zip(gt['annotations'], pred_anns, strict=True):
        gt_ids = rgb_to_id(np.asarray(Image.open(f"{gt_folder}/{gt_ann['file_name']}")))
        pred_ids = rgb_to_id(np.asarray(Image.open(pred_folder / pred_ann['file_name'])))
        ours = pq_stats(gt_ids, {s['id']: (label_of[s['category_id']], s['iscrowd'])
                                 for s in gt_ann['segments_info']},
                        pred_ids, {s['id']: label_of[s['category_id']]
                                   for s in pred_ann['segments_info']}, K)
        with contextlib.redirect_stdout(io.StringIO()):
            ref = cs_eval.pq_compute_single_core(
                0, [(gt_ann, pred_ann)], gt_folder, str(pred_folder),
                {c['id']: c for c in CATEGORIES})
        for label, cat_id in enumerate(CAT_IDS):
            r = ref[cat_id]
            assert ours[label, 1:].tolist() == [r.tp, r.fp, r.fn]
            assert abs(ours[label, 0] - r.iou) < 1e-12


def test_ground_truth_from_the_sample_equals_files(data):
    """Without ann_file: gt_panoptic_seg as LoadPanopticAnnotations makes it, or the PNG at
    seg_map_path with segments_info (crowd as iscrowd, or as MMDetection's is_thing)."""
    ann_file, gt_folder, preds, _ = data
    want = run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder), samples(preds))
    gt = {a['image_id']: a for a in json.load(open(ann_file))['annotations']}
    label_of = {c: i for i, c in enumerate(CAT_IDS)}
    things = tuple(c['name'] for c in CATEGORIES if c['isthing'])
    for source in ('gt_panoptic_seg', 'iscrowd', 'is_thing'):
        data_samples = samples(preds)
        for s in data_samples:
            ann = gt[s.img_id]
            path = f"{gt_folder}/{ann['file_name']}"
            info = [dict(id=g['id'], category=label_of[g['category_id']],
                         is_thing=bool(CATEGORIES[label_of[g['category_id']]]['isthing']),
                         iscrowd=bool(g['iscrowd'])) for g in ann['segments_info']]
            if source == 'gt_panoptic_seg':
                pan = panoptic_targets(read_panoptic_png(path), info, K)['gt_panoptic_seg']
                s.gt_panoptic_seg = PixelData(data=torch.from_numpy(pan.astype(np.int64))[None])
            else:
                if source == 'is_thing':  # MMDetection's data_info: no iscrowd key
                    info = [dict(id=g['id'], category=g['category'],
                                 is_thing=g['is_thing'] and not g['iscrowd']) for g in info]
                s.set_metainfo(dict(segments_info=info, seg_map_path=path))
        metric = METRICS.build(dict(type='CocoPanopticMetric'))
        metric.dataset_meta = dict(classes=tuple(c['name'] for c in CATEGORIES),
                                   thing_classes=things, cat_ids=CAT_IDS)
        metric.process({}, [s.to_dict() for s in data_samples])  # as mmengine's Evaluator
        got = metric.evaluate(len(data_samples))
        assert got == {f'coco_panoptic/{k}': v for k, v in want.items()}, source


def test_dataset_pipeline_ground_truth(data):
    """CocoPanopticDataset -> LoadPanopticAnnotations -> PackDetInputs: the packed
    gt_panoptic_seg scores as the files do, and predicted as itself scores 100."""
    ann_file, gt_folder, preds, tmp_path = data
    (tmp_path / 'img').mkdir()
    for img_id in preds:
        Image.fromarray(np.zeros((H, W, 3), np.uint8)).save(tmp_path / 'img' / f'{img_id:06d}.jpg')
    with DefaultScope.overwrite_default_scope('densevit'):
        dataset = DATASETS.build(dict(
            type='CocoPanopticDataset', ann_file=ann_file, test_mode=True,
            data_prefix=dict(img=str(tmp_path / 'img'), seg=gt_folder),
            pipeline=[dict(type='LoadImage'), dict(type='LoadPanopticAnnotations'),
                      dict(type='PackDetInputs')]))
        packed = [dataset[i]['data_samples'] for i in range(len(dataset))]
    for perfect in (False, True):
        for s in packed:
            pan = s.gt_panoptic_seg.data if perfect else torch.from_numpy(preds[s.img_id])[None]
            s.pred_panoptic_seg = PixelData(sem_seg=pan)
        from_files = CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder)
        from_samples = CocoPanopticMetric()
        for metric in (from_files, from_samples):
            metric.dataset_meta = dataset.metainfo
            metric.process({}, [s.to_dict() for s in packed])
        got = from_samples.compute_metrics(from_samples.results)
        assert got == from_files.compute_metrics(from_files.results)
        assert (got['PQ'] == 100) == perfect


def test_duplicates_subset_and_format_only(data):
    ann_file, gt_folder, preds, tmp_path = data
    data_samples = samples(preds)
    once = run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder), data_samples)
    twice = run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder),
                data_samples + data_samples[:2])  # a padding sampler
    assert once == twice
    prefix = str(tmp_path / 'fmt' / 'r')
    metric = CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder, format_only=True,
                                outfile_prefix=prefix)
    assert run(metric, data_samples) == {}
    written = json.load(open(f'{prefix}.panoptic.json'))
    assert len(written['annotations']) == len(preds)
    assert {c['id'] for c in written['categories']} == set(CAT_IDS)
    # a class subset (the dataset's cat_ids): other categories' ground truth is void
    metric = CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder)
    metric.dataset_meta = dict(classes=('person', 'sky'), cat_ids=[1, 2])
    subset = {}
    for img_id, pan in preds.items():
        label = pan % INSTANCE_OFFSET
        keep = np.isin(label, [0, 3])
        subset[img_id] = np.where(keep, np.where(label == 3, 1, pan), 2)  # void = 2
    metric.process({}, samples(subset))
    got = metric.compute_metrics(metric.results)
    assert set(got) == set(once) and got['PQ'] != once['PQ']


def test_refusals(data):
    ann_file, gt_folder, preds, tmp_path = data
    data_samples = samples(preds)
    img_id = data_samples[0].img_id
    bad = preds[img_id].copy()
    bad[0, 0] = K + 1 + 2 * INSTANCE_OFFSET  # label K + 1: no category
    with pytest.raises(ValueError, match=f'image {img_id}.*{K + 1 + 2 * INSTANCE_OFFSET}'):
        run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder), samples({img_id: bad}))
    with pytest.raises(DataError, match=f'{img_id:06d}.png.*32x48.*16x48'):
        run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder),
            samples({img_id: preds[img_id][:16]}))
    with pytest.raises(FileNotFoundError, match=f'elsewhere/{img_id:06d}.png'):
        run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=str(tmp_path / 'elsewhere')),
            data_samples[:1])
    with pytest.raises(DataError, match='999.*panoptic_val.json'):
        run(CocoPanopticMetric(ann_file=ann_file, seg_prefix=gt_folder),
            samples({999: preds[img_id]}))
    # a ground-truth PNG id missing from segments_info: named with its file
    gt = json.load(open(ann_file))
    gt['annotations'][0]['segments_info'].pop()
    (tmp_path / 'cut.json').write_text(json.dumps(gt))
    first = gt['annotations'][0]['image_id']
    with pytest.raises(DataError, match=f'{first:06d}.png.*ground-truth ids'):
        run(CocoPanopticMetric(ann_file=str(tmp_path / 'cut.json'), seg_prefix=gt_folder),
            samples({first: preds[first]}))
    with pytest.raises(ValueError, match='together'):
        CocoPanopticMetric(ann_file=ann_file)
    with pytest.raises(ValueError, match='thing_classes'):
        run(CocoPanopticMetric(), data_samples)
