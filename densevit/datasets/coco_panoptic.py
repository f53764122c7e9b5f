"""COCO panoptic segmentation data set (COCO 2017 panoptic, or any file in its format).

The format: a JSON file and a folder of PNGs, one per image, each pixel's colour its
segment id (``id = R + 256 G + 256^2 B``, 0 = VOID: unlabelled)::

    images:      [dict(id, file_name, width, height)]
    annotations: [dict(image_id, file_name,            # the PNG, in the PNG folder
                       segments_info=[dict(id,          # the colour of its pixels
                                           category_id,
                                           iscrowd=0,   # 1: a crowd region of a thing class
                                           area, bbox)])]
    categories:  [dict(id, name, isthing)]              # isthing 1: countable objects

``load_data_list`` returns one dict per image::

    dict(img_path=str, img_id=int, seg_map_path=str, height=int, width=int,
         num_classes=int,
         segments_info=[dict(id=int,          # the segment id in the PNG
                             category=int,    # contiguous label 0..K-1
                             is_thing=bool,
                             iscrowd=bool)])

Labels: the thing categories in ascending id, then the stuff categories in ascending id
(COCO panoptic: labels 0-79 are the 80 things, 80-132 the 53 stuff classes, as in
MMDetection). ``metainfo``: ``classes`` (that order), ``thing_classes``,
``stuff_classes``, ``cat_ids`` (ids in label order).

Checked when the file is loaded (a :class:`DataError` naming the file and the value):
the keys above, a category without ``isthing`` (all of them named at once) or with
another value than 0 / 1, repeated category or image ids, an annotation for an unknown
image, an image with no annotation or with two, a segment of an unknown category, a
segment id that repeats in its image or lies outside ``1 .. 256^3 - 1``, and PNGs
that do not exist (the first few named, and how many). What needs a PNG decoded (its
size against its image, its ids against ``segments_info``) is checked when it is first
read (:class:`~densevit.datasets.transforms.panoptic_loading.LoadPanopticAnnotations`);
tools/dataset/check.py checks every PNG.
"""
import collections
import os.path as osp

from mmengine import fileio
from mmengine.dataset import BaseDataset

from densevit.datasets.coco import SHOW_FIRST, filter_images, id_problems, read_coco_json
from densevit.datasets.transforms.loading import DataError
from densevit.datasets.unreadable import SkipUnreadableMixin
from densevit.registry import DATASETS
from densevit.utils.defaults import DEFAULT, resolve_default

REQUIRED_KEYS = dict(file=('images', 'annotations', 'categories'),
                     image=('id', 'file_name', 'width', 'height'),
                     annotation=('image_id', 'file_name', 'segments_info'),
                     category=('id', 'name'),  # isthing: _check_categories, all at once
                     segment=('id', 'category_id'))
MAX_SEGMENT_ID = 256 ** 3 - 1  # the largest id a 3-channel 8-bit PNG holds


def _check_categories(categories, ann_file):
    """Every category has an ``isthing`` of 0 / 1 and its own id; all offenders at once."""
    without = [f'{c.get("id")} ({c.get("name")})' for c in categories if 'isthing' not in c]
    if without:
        raise DataError(f'{ann_file}: categories without "isthing": {", ".join(without)}; a '
                        'panoptic category must say whether it is a thing (1) or stuff (0)')
    for c in categories:
        if c['isthing'] not in (0, 1):  # True / False compare equal to 1 / 0
            raise DataError(f'{ann_file}: category {c["id"]} ({c["name"]}) has isthing='
                            f'{c["isthing"]!r}; expected 0 (stuff) or 1 (thing)')
    repeated = [i for i, n in collections.Counter(c['id'] for c in categories).items() if n > 1]
    if repeated:
        raise DataError(f'{ann_file}: category ids used by more than one category: {repeated}')


def _check_segments(ann, cat_ids, ann_file):
    where = f'{ann_file}: annotation {ann["file_name"]} (image {ann["image_id"]})'
    if not isinstance(ann['segments_info'], list):
        raise DataError(f'{where}: segments_info must be a list, got '
                        f'{type(ann["segments_info"]).__name__}')
    seen = set()
    for i, seg in enumerate(ann['segments_info']):
        missing = [k for k in REQUIRED_KEYS['segment'] if k not in seg]
        if missing:
            raise DataError(f'{where}: segment #{i} has no key {missing[0]!r} (a segment needs '
                            f'{", ".join(REQUIRED_KEYS["segment"])})')
        if not isinstance(seg['id'], int) or not 0 < seg['id'] <= MAX_SEGMENT_ID:
            raise DataError(f'{where}: segment id {seg["id"]!r} is not an integer in 1..'
                            f'{MAX_SEGMENT_ID} (0 is VOID in the PNG)')
        if seg['id'] in seen:
            raise DataError(f'{where}: segment id {seg["id"]} is listed twice')
        seen.add(seg['id'])
        if seg['category_id'] not in cat_ids:
            raise DataError(f'{where}: segment {seg["id"]} has category_id '
                            f'{seg["category_id"]!r}, which is not in "categories" '
                            f'(ids {sorted(cat_ids)})')
        if seg.get('iscrowd', 0) not in (0, 1):
            raise DataError(f'{where}: segment {seg["id"]} has iscrowd={seg["iscrowd"]!r}; '
                            'expected 0 or 1')


def load_panoptic_json(ann_file):
    """Read and check a COCO panoptic JSON (the checks of this module's docstring that
    need no PNG); return the parsed dict and ``{image id: annotation}``."""
    data = read_coco_json(ann_file, (
        'COCO panoptic annotation file not found', 'Download COCO 2017 panoptic and place it '
        'under data/coco/ (see docs/datasets.md), or point ann_file / data_root at your own '
        'file in its format.'), REQUIRED_KEYS)
    _check_categories(data['categories'], ann_file)
    problems = id_problems(data, ann_file, ann_ids=False)
    if problems:
        raise DataError(problems[0])
    files = {img['id']: img['file_name'] for img in data['images']}
    cat_ids = {c['id'] for c in data['categories']}
    by_image = {}
    for ann in data['annotations']:
        if ann['image_id'] not in files:
            raise DataError(f'{ann_file}: annotation {ann["file_name"]} has image_id '
                            f'{ann["image_id"]}, which is not in "images"')
        if ann['image_id'] in by_image:
            raise DataError(f'{ann_file}: image {ann["image_id"]} ({files[ann["image_id"]]}) '
                            f'has two annotations ({by_image[ann["image_id"]]["file_name"]}, '
                            f'{ann["file_name"]})')
        _check_segments(ann, cat_ids, ann_file)
        by_image[ann['image_id']] = ann
    without = [name for i, name in files.items() if i not in by_image]
    if without:
        more = f' and {len(without) - SHOW_FIRST} more' if len(without) > SHOW_FIRST else ''
        raise DataError(f'{ann_file}: images without an annotation (segments_info and PNG): '
                        f'{", ".join(without[:SHOW_FIRST])}{more}')
    return data, by_image


def panoptic_label_order(categories):
    """Categories in label order: things by ascending id, then stuff by ascending id."""
    return (sorted((c for c in categories if c['isthing']), key=lambda c: c['id'])
            + sorted((c for c in categories if not c['isthing']), key=lambda c: c['id']))


@DATASETS.register_module()
class CocoPanopticDataset(SkipUnreadableMixin, BaseDataset):
    """COCO-format panoptic segmentation data set (see the module docstring).

    Args:
        ann_file (str): the panoptic JSON, relative to ``data_root`` unless absolute.
        data_root (str): root joined to ``ann_file`` and ``data_prefix``.
        data_prefix (dict): ``dict(img='train2017/', seg='annotations/panoptic_train2017/')``:
            the image folder and the PNG folder; default ``dict(img='', seg='')``.
        filter_cfg (dict, optional): ``dict(filter_empty_gt=True, min_size=32)`` drops
            (outside ``test_mode``) images without a non-crowd thing segment, and images
            whose shorter side is below ``min_size`` pixels. None keeps every image.
        metainfo (dict, optional): ``dict(classes=(...))`` must name the file's
            categories in label order (things, then stuff, each by ascending id); a
            subset is refused (its pixels would have no label).
        skip_unreadable (bool): as :class:`~densevit.datasets.coco.CocoDataset`.
        collect_problems (bool): do not refuse missing PNGs when loading (each is then
            reported by its image): tools/dataset/check.py uses it.
        backend_args (dict, optional): mmengine fileio backend, to find the PNGs.
        **kwargs: the rest of ``mmengine.dataset.BaseDataset``.

    After loading: ``cat_ids`` (label order), ``cat2label``, ``label2cat``, ``num_things``.
    """

    METAINFO = dict(classes=None, thing_classes=None, stuff_classes=None)

    def __init__(self, ann_file='', data_root='', data_prefix=DEFAULT, filter_cfg=None,
                 metainfo=None, collect_problems=False, backend_args=None, **kwargs):
        data_prefix = resolve_default(data_prefix, dict(img='', seg=''))
        self.collect_problems = collect_problems
        self.backend_args = backend_args
        super().__init__(ann_file=ann_file, data_root=data_root, data_prefix=data_prefix,
                         filter_cfg=filter_cfg, metainfo=metainfo, **kwargs)

    def load_data_list(self):
        data, by_image = load_panoptic_json(self.ann_file)
        categories = panoptic_label_order(data['categories'])
        names = tuple(c['name'] for c in categories)
        wanted = self._metainfo.get('classes')
        if wanted is not None and tuple(wanted) != names:
            raise DataError(f'{self.ann_file}: metainfo classes {tuple(wanted)} are not its '
                            f'categories in label order (things, then stuff, each by id): {names}')
        self.cat_ids = [c['id'] for c in categories]
        self.cat2label = {cat_id: label for label, cat_id in enumerate(self.cat_ids)}
        self.label2cat = {label: cat_id for cat_id, label in self.cat2label.items()}
        self.num_things = sum(1 for c in categories if c['isthing'])
        self._metainfo.update(classes=names, thing_classes=names[:self.num_things],
                              stuff_classes=names[self.num_things:], cat_ids=tuple(self.cat_ids))
        if not data['images']:
            raise DataError(f'{self.ann_file} has no images')
        is_thing = {c['id']: bool(c['isthing']) for c in categories}
        data_list = []
        for img in sorted(data['images'], key=lambda i: i['id']):
            ann = by_image[img['id']]
            segments = [dict(id=s['id'], category=self.cat2label[s['category_id']],
                             is_thing=is_thing[s['category_id']], iscrowd=bool(s.get('iscrowd', 0)))
                        for s in ann['segments_info']]
            data_list.append(dict(
                img_path=osp.join(self.data_prefix.get('img', ''), img['file_name']),
                img_id=img['id'], height=img['height'], width=img['width'],
                seg_map_path=osp.join(self.data_prefix.get('seg', ''), ann['file_name']),
                num_classes=len(names), segments_info=segments))
        if not self.collect_problems:
            self._check_pngs_exist(data_list)
        return data_list

    def _check_pngs_exist(self, data_list):
        missing = [d['seg_map_path'] for d in data_list
                   if not fileio.exists(d['seg_map_path'], backend_args=self.backend_args)]
        if missing:
            more = f' and {len(missing) - SHOW_FIRST} more' if len(missing) > SHOW_FIRST else ''
            raise DataError(f'{self.ann_file}: panoptic PNGs not found: '
                            f'{", ".join(missing[:SHOW_FIRST])}{more} (data_prefix seg='
                            f'{self.data_prefix.get("seg")!r}; tools/dataset/check.py lists all)')

    def filter_data(self):
        if self.test_mode:
            return self.data_list
        return filter_images(self.data_list, self.filter_cfg, self.ann_file, lambda d: any(
            s['is_thing'] and not s['iscrowd'] for s in d['segments_info']))

    def get_cat_ids(self, idx):
        """Labels (0..K-1) of the segments of image ``idx`` (for class-aware samplers)."""
        return [s['category'] for s in self.get_data_info(idx)['segments_info']]
