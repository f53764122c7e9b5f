"""COCO-format detection data set (COCO 2017 or any file in the same format).

``load_data_list`` returns one dict per image::

    dict(img_path=str, img_id=int, height=int, width=int,
         instances=[dict(bbox=[x1, y1, x2, y2],  # float, absolute pixels, inside the image
                         bbox_label=int,         # contiguous 0..K-1
                         ignore_flag=0 or 1,     # 1 for crowd boxes: never matched, never penalised
                         ann_id=int,             # the annotation's id (named in errors)
                         mask=...)])             # the COCO segmentation, when the file has one

Labels follow ascending category id: ``label = cat_ids.index(category_id)``.

Image ids and annotation ids must be unique: annotations find their image by id
(pycocotools keeps the last image of an id, so another file would vanish and its boxes
move), and pycocotools keeps one box per annotation id (evaluation would score against
the wrong boxes). A file that repeats either is refused with a :class:`DataError` naming
the ids (and, for images, the files); ``renumber_ann_ids=True`` numbers annotations
1..N in file order instead.
"""
import collections
import contextlib
import io
import json
import logging
import os.path as osp

from mmengine.dataset import BaseDataset
from mmengine.logging import print_log
from pycocotools.coco import COCO

from densevit.datasets.transforms.loading import DataError
from densevit.datasets.unreadable import SkipUnreadableMixin
from densevit.registry import DATASETS
from densevit.utils.defaults import DEFAULT, resolve_default

REQUIRED_KEYS = dict(file=('images', 'annotations', 'categories'),
                     image=('id', 'file_name', 'width', 'height'),
                     annotation=('id', 'image_id', 'category_id', 'bbox'),
                     category=('id', 'name'))
SHOW_FIRST = 5  # repeated ids named in an error


def _check_keys(items, kind, ann_file, required=REQUIRED_KEYS):
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f'{ann_file}: {kind} #{i} is not a JSON object: {str(item)[:60]}')
        missing = [k for k in required[kind] if k not in item]
        if missing:
            raise DataError(f'{ann_file}: {kind} #{i} has no key {missing[0]!r} '
                            f'(a COCO {kind} needs {", ".join(required[kind])})')


def read_coco_json(ann_file, not_found, required=REQUIRED_KEYS):
    """The parsed JSON object of ``ann_file`` with the keys ``required`` names checked in
    the file, its images, annotations and categories. FileNotFoundError (``not_found``
    after the path) or DataError naming the file."""
    if not osp.isfile(ann_file):
        raise FileNotFoundError(f'{not_found[0]}: {ann_file}. {not_found[1]}')
    try:
        with open(ann_file) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f'{ann_file} is not valid JSON: {e}') from None
    if not isinstance(data, dict):
        raise DataError(f'{ann_file}: expected a JSON object with keys images / annotations / '
                        f'categories, got {type(data).__name__}')
    _check_keys([data], 'file', ann_file, required)
    for kind in ('image', 'annotation', 'category'):
        _check_keys(data['categories' if kind == 'category' else kind + 's'], kind, ann_file,
                    required)
    return data


def _shown(items):
    """The first few of ``items`` joined, then how many more there are."""
    more = len(items) - SHOW_FIRST
    return ', '.join(items[:SHOW_FIRST]) + (f' and {more} more' if more > 0 else '')


def repeated_ann_ids(annotations):
    """{annotation id: count} of the ids used by more than one annotation (file order)."""
    counts = collections.Counter(ann.get('id') for ann in annotations)
    return {i: n for i, n in counts.items() if n > 1}


def renumber_annotations(annotations):
    """Number the annotations 1..N in file order (in place): what ``renumber_ann_ids=True``
    does to the dataset's file and what CocoMetric does to its ground truth."""
    for i, ann in enumerate(annotations, 1):
        ann['id'] = i


def id_problems(data, ann_file, ann_ids=True):
    """One line per kind of repeated id in a parsed COCO file: image ids (naming each
    id's files), and with ``ann_ids`` annotation ids (naming each id's count)."""
    problems, files = [], collections.defaultdict(list)
    for img in data['images']:
        files[img.get('id')].append(str(img.get('file_name')))
    images = [f'id {i} ({", ".join(names)})' for i, names in files.items() if len(names) > 1]
    if images:
        problems.append(
            f'{ann_file}: image ids used by more than one image: {_shown(images)}; '
            'annotations find their image by id, so one file would be lost and its boxes '
            'given to the other: give every image its own id')
    repeated = repeated_ann_ids(data['annotations']) if ann_ids else {}
    if repeated:
        counts = [f'id {i} ({n} times)' for i, n in repeated.items()]
        problems.append(
            f'{ann_file}: annotation ids used by more than one annotation: {_shown(counts)}; '
            'pycocotools keeps one box per id, so evaluation would score against other boxes '
            'than training uses: set renumber_ann_ids=True on the dataset to number them '
            '1..N in file order')
    return problems


def load_coco_json(ann_file, renumber_ann_ids=False, problems=None):
    """Read and validate a COCO annotation file; return a ``pycocotools.coco.COCO``.

    Raises FileNotFoundError, or DataError (a ValueError) whose message names the file.
    Repeated image or annotation ids are one DataError naming them, unless
    ``renumber_ann_ids`` (annotations numbered 1..N in file order), or unless
    ``problems`` is a list: their lines go there and the file is loaded anyway.
    """
    data = read_coco_json(ann_file, (
        'COCO annotation file not found', 'Download COCO 2017 and place it under data/coco/ '
        '(see docs/datasets.md), or point ann_file / data_root at your own COCO-format JSON.'))
    cat_ids = {c['id'] for c in data['categories']}
    img_ids = {img['id'] for img in data['images']}
    for ann in data['annotations']:
        if ann['category_id'] not in cat_ids:
            raise DataError(f'{ann_file}: annotation {ann["id"]} has category_id '
                            f'{ann["category_id"]}, which is not in "categories" '
                            f'(ids {sorted(cat_ids)})')
        if ann['image_id'] not in img_ids:
            raise DataError(f'{ann_file}: annotation {ann["id"]} has image_id {ann["image_id"]}, '
                            'which is not in "images"')
        if len(ann['bbox']) != 4:
            raise DataError(f'{ann_file}: annotation {ann["id"]} bbox must be [x, y, w, h], '
                            f'got {ann["bbox"]}')
    found = id_problems(data, ann_file, ann_ids=not renumber_ann_ids)
    if found and problems is None:
        raise DataError('; '.join(found))
    if problems is not None:
        problems += found
    if renumber_ann_ids:
        renumber_annotations(data['annotations'])
    coco = COCO()  # built from the parsed dict: the file is read once
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' "creating index..."
        coco.createIndex()
    return coco


def clip_coco_box(bbox, width, height):
    """COCO ``[x, y, w, h]`` -> ``[x1, y1, x2, y2]`` clipped to a ``width`` x ``height``
    image, or None when nothing is left (zero or negative width or height).

    The one rule for which boxes exist: CocoDataset drops the None boxes from
    training and evaluation data, and CocoMetric drops them from the ground truth it
    scores against, so both count the same boxes.
    """
    x, y, bw, bh = map(float, bbox)
    box = [min(max(x, 0.), width), min(max(y, 0.), height),
           min(max(x + bw, 0.), width), min(max(y + bh, 0.), height)]
    return None if box[2] <= box[0] or box[3] <= box[1] else box


def filter_images(data_list, filter_cfg, ann_file, has_gt):
    """The images of ``data_list`` that ``filter_cfg`` keeps: ``filter_empty_gt`` drops
    those for which ``has_gt(info)`` is False, ``min_size`` those whose shorter side is
    smaller. A DataError naming ``ann_file`` when none is left."""
    if not filter_cfg:
        return data_list
    filter_empty = filter_cfg.get('filter_empty_gt', False)
    min_size = filter_cfg.get('min_size', 0)
    kept = [d for d in data_list if min(d['width'], d['height']) >= min_size
            and not (filter_empty and not has_gt(d))]
    if data_list and not kept:  # mmengine would fail later with a cryptic numpy error
        raise DataError(f'{ann_file}: none of its {len(data_list)} images is left '
                        f'after filtering with filter_cfg={filter_cfg}')
    return kept


@DATASETS.register_module()
class CocoDataset(SkipUnreadableMixin, BaseDataset):
    """COCO-format detection data set.

    Args:
        ann_file (str): annotation JSON, relative to ``data_root`` unless absolute.
        data_root (str): root joined to ``ann_file`` and ``data_prefix``.
        data_prefix (dict): ``dict(img='train2017/')``: the image folder; default
            ``dict(img='')``.
        filter_cfg (dict, optional): ``dict(filter_empty_gt=True, min_size=32)`` drops
            (outside ``test_mode``) images without non-ignored boxes, and images whose
            shorter side is below ``min_size`` pixels. None keeps every image.
        metainfo (dict, optional): ``dict(classes=(...))`` keeps only these categories
            (by name); labels still follow ascending category id.
        skip_unreadable (bool): in training, replace a missing or undecodable image by
            another and log a count per epoch (:mod:`densevit.datasets.unreadable`);
            default False: such an image stops training with an error naming it.
        renumber_ann_ids (bool): number the annotations 1..N in file order (the box
            messages of tools/dataset/check.py then use these numbers). Default False:
            a file whose annotation ids repeat is refused. CocoMetric numbers them the
            same way by itself, so it scores against every box training uses.
        collect_problems (bool): load a file whose image or annotation ids repeat, or
            without a trainable box, anyway, listing the problems in ``file_problems``
            (a repeated image id's boxes go with its first file; nothing is filtered):
            tools/dataset/check.py uses it to go on checking every image.
        **kwargs: the rest of ``mmengine.dataset.BaseDataset`` (pipeline, test_mode,
            lazy_init, indices, serialize_data, max_refetch).

    After loading: ``cat_ids`` (ascending), ``cat2label`` {category id: label},
    ``label2cat`` {label: category id}; ``metainfo['classes']`` (names, label order)
    and ``metainfo['cat_ids']`` (ids, label order, for mapping predictions back).

    Raises :class:`DataError` (a ValueError, one line naming the file) on a malformed
    file, repeated ids, and outside ``test_mode`` a file without a trainable box
    (every box crowd / ignored, or none at all).
    """

    METAINFO = dict(classes=None)  # read from the annotation file

    def __init__(self, ann_file='', data_root='', data_prefix=DEFAULT, filter_cfg=None,
                 metainfo=None, renumber_ann_ids=False, collect_problems=False, **kwargs):
        data_prefix = resolve_default(data_prefix, dict(img=''))
        self.renumber_ann_ids = renumber_ann_ids
        self.file_problems = [] if collect_problems else None  # read by tools/dataset/check.py
        super().__init__(ann_file=ann_file, data_root=data_root, data_prefix=data_prefix,
                         filter_cfg=filter_cfg, metainfo=metainfo, **kwargs)

    def load_data_list(self):
        coco = load_coco_json(self.ann_file, self.renumber_ann_ids, self.file_problems)
        self.class_subset = False  # metainfo['classes'] leaves out some categories
        categories = sorted(coco.dataset['categories'], key=lambda c: c['id'])
        wanted = self._metainfo.get('classes')
        if wanted is not None:
            names = {c['name'] for c in categories}
            unknown = [n for n in wanted if n not in names]
            if unknown:
                raise DataError(f'classes {unknown} are not categories of {self.ann_file} '
                                f'(it has {sorted(names)})')
            kept = [c for c in categories if c['name'] in set(wanted)]
            self.class_subset, categories = len(kept) < len(categories), kept
        self.cat_ids = [c['id'] for c in categories]
        self.cat2label = {cat_id: label for label, cat_id in enumerate(self.cat_ids)}
        self.label2cat = {label: cat_id for cat_id, label in self.cat2label.items()}
        self._metainfo.update(classes=tuple(c['name'] for c in categories),
                              cat_ids=tuple(self.cat_ids))

        if not coco.imgs:
            raise DataError(f'{self.ann_file} has no images')
        data_list, clipped, dropped = [], 0, 0
        self.box_problems = []  # (file name, what): read by tools/dataset/check.py
        seen = set()  # a repeated image id (collect_problems only): boxes go with the first
        for img in sorted(coco.dataset['images'], key=lambda i: i['id']):
            img_id, w, h = img['id'], img['width'], img['height']
            instances = []
            for ann in [] if img_id in seen else coco.imgToAnns.get(img_id, []):
                if ann['category_id'] not in self.cat2label:
                    continue  # a category left out by metainfo['classes']
                box = clip_coco_box(ann['bbox'], w, h)
                x, y, bw, bh = map(float, ann['bbox'])
                if box is None or box != [x, y, x + bw, y + bh]:
                    self.box_problems.append((img['file_name'], (
                        f'annotation {ann["id"]}: box {ann["bbox"]} '
                        + ('has zero or negative width/height inside the image (dropped)'
                           if box is None else f'extends past the {w}x{h} image (clipped)'))))
                if box is None:
                    dropped += 1
                    continue
                clipped += 1 if box != [x, y, x + bw, y + bh] else 0
                ignore = ann.get('iscrowd', 0) or ann.get('ignore', False)
                instances.append(dict(bbox=box, bbox_label=self.cat2label[ann['category_id']],
                                      ignore_flag=int(bool(ignore)), ann_id=ann['id']))
                if 'segmentation' in ann:  # decoded by LoadDetAnnotations(with_mask=True)
                    instances[-1]['mask'] = ann['segmentation']
            seen.add(img_id)
            img_path = osp.join(self.data_prefix.get('img', ''), img['file_name'])
            data_list.append(dict(img_path=img_path, img_id=img_id, height=h, width=w,
                                  instances=instances))
        if clipped or dropped:
            # one line per file: a per-box warning would flood the log on real data
            print_log(f'{self.ann_file}: clipped {clipped} boxes to their image, dropped {dropped} '
                      'boxes with zero or negative width/height after clipping',
                      logger='current', level=logging.WARNING)
        return data_list

    def filter_data(self):
        if self.test_mode:
            return self.data_list
        if not self._check_trainable():  # collect_problems: keep every image to check
            return self.data_list
        return filter_images(self.data_list, self.filter_cfg, self.ann_file,
                             lambda d: any(not i['ignore_flag'] for i in d['instances']))

    def _check_trainable(self):
        """A training set needs a box that is neither crowd nor ignored: DETR's loss
        matches none of the others, so it would train on "no object" alone. False when
        there is none and ``collect_problems`` listed it; a DataError without."""
        boxes = [i for d in self.data_list for i in d['instances']]
        if any(not i['ignore_flag'] for i in boxes):
            return True
        what = (f'all {len(boxes)} of its boxes are iscrowd=1 or ignore (never matched, '
                'never penalised)' if boxes else 'it has no boxes')
        of = f' of classes {self.metainfo["classes"]}' if self.class_subset else ''
        problem = (f'{self.ann_file}: no trainable box{of} in its {len(self.data_list)} '
                   f'images: {what}; a training set needs boxes with iscrowd=0 '
                   '(test_mode=True evaluates such a file)')
        if self.file_problems is None:
            raise DataError(problem)
        self.file_problems.append(problem)
        return False

    def get_cat_ids(self, idx):
        """Labels (0..K-1) of the instances of image ``idx`` (for class-aware samplers)."""
        return [i['bbox_label'] for i in self.get_data_info(idx)['instances']]
