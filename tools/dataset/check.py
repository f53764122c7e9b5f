"""Check the train and val data of a config before training; report every problem at once.

``python tools/dataset/check.py CONFIG [--splits train val] [--cfg-options k=v]``

The datasets are built from the config, so their own parsing is checked (a COCO
file's keys and category ids, a label folder's pairing); a COCO file's repeated image
or annotation ids, and a training file without a trainable box, are listed, and the
check goes on. Then every image:

- decodes (``LoadImage``); detection: its size equals the annotation's width / height
  (as stored, or with its EXIF orientation applied: a mismatch names the tag); boxes
  inside the image and of positive size; labels within the classes;
- segmentation: the label map decodes, has the image's size and holds only class
  indices or ``ignore_index`` (``LoadSegAnnotations``);
- instance masks (a COCO file whose annotations have a ``segmentation``): each decodes
  (polygons of at least 3 points, an RLE of the image's size whose runs cover it), no
  polygon vertex lies more than 1 pixel outside the image, no mask is empty, and no two
  non-crowd masks of an image share more than ``--max-mask-overlap`` (1%) of the
  smaller one;
- panoptic (a COCO panoptic file): its categories all say ``isthing`` (when the dataset
  loads), each image has its annotation's size, each PNG exists, decodes, has its image's size and holds exactly the segment
  ids of its ``segments_info``.

Each problem is printed with its file; a summary table follows. Exit status 1 if
any problem was found, else 0.
"""
import argparse
import collections
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from mmengine.config import Config, DictAction
from mmengine.registry import init_default_scope
from pycocotools import mask as mask_utils

from densevit.datasets.coco import CocoDataset
from densevit.datasets.coco_panoptic import CocoPanopticDataset
from densevit.datasets.masks import check_overlaps, instance_rles, polygon_outside
from densevit.datasets.transforms.loading import IMAGE_ERRORS, DataError, LoadImage
from densevit.datasets.transforms.panoptic_loading import panoptic_png_problems, read_panoptic_png
from densevit.datasets.transforms.seg_loading import LoadSegAnnotations
from densevit.registry import DATASETS

KINDS = ('image', 'size', 'box', 'label', 'label map', 'mask', 'panoptic', 'dataset')
OUTSIDE_TOLERANCE = 1.0  # pixels a polygon vertex may lie outside its image


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('config')
    p.add_argument('--splits', nargs='+', default=['train', 'val'], choices=['train', 'val', 'test'])
    p.add_argument('--workers', type=int, default=4, help='threads decoding images')
    p.add_argument('--progress-every', type=float, default=10.0,
                   help='seconds between progress lines on long scans')
    p.add_argument('--max-mask-overlap', type=float, default=0.01,
                   help='fraction of the smaller of two non-crowd instance masks of an image '
                        'they may share (1 turns the check off)')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return p.parse_args(argv)


def check_size(info, img):
    """The image's size against its annotation's width / height."""
    h, w = img.shape[:2]
    if (info.get('height'), info.get('width')) == (h, w):
        return []
    return [('size', f'{info["img_path"]}: image is {w}x{h} but its annotation says '
                     f'{info.get("width")}x{info.get("height")} (width x height)')]


def check_detection(info, img, num_classes):
    """Image size against the annotation, labels against the classes."""
    problems, path = check_size(info, img), info['img_path']
    for inst in info['instances']:
        if not 0 <= inst['bbox_label'] < num_classes:
            problems.append(('label', f'{path}: label {inst["bbox_label"]} outside 0..{num_classes - 1}'))
    return problems


def check_masks(info, max_overlap):
    """Instance masks: decodable, inside the image, not empty, not overlapping."""
    lines, path = [], info['img_path']
    info = {k: v for k, v in info.items() if k != 'ori_shape'}  # a size mismatch is 'size'
    rles, names = instance_rles(info, lines)
    h, w = info['height'], info['width']
    for inst, rle, name in zip(info['instances'], rles, names, strict=True):
        outside = polygon_outside(inst.get('mask'), h, w)
        if outside > OUTSIDE_TOLERANCE:
            lines.append(f'{path}: {name}: a polygon vertex lies {outside:.1f} pixels outside '
                         f'the {w}x{h} image')
        if rle is not None and not mask_utils.area(rle):
            lines.append(f'{path}: {name}: its mask is empty')
    if max_overlap < 1:
        lines += check_overlaps(info, rles, names, max_overlap)
    return [('mask', line) for line in lines]


def check_panoptic(info, results):
    """The PNG: present, decodable, of its image's size, with its segments' ids."""
    try:
        ids = read_panoptic_png(info['seg_map_path'])
    except (FileNotFoundError, DataError) as e:
        return [('panoptic', str(e))]
    return [('panoptic', line)
            for line in panoptic_png_problems(ids, dict(info, ori_shape=results['img_shape']))]


def check_one(info, num_classes, max_overlap=1.0):
    """[(kind, message naming the file)] of one data info (an image and its annotations)."""
    try:  # with the annotation's width / height: the frame LoadImage picks in training
        results = LoadImage()({k: info[k] for k in ('img_path', 'width', 'height') if k in info})
    except IMAGE_ERRORS as e:
        return [('image', str(e))]
    except DataError as e:  # an EXIF orientation, and neither frame has the annotation's size
        return [('size', str(e))]
    if 'segments_info' in info:
        return check_size(info, results['img']) + check_panoptic(info, results)
    if 'instances' in info:
        problems = check_detection(info, results['img'], num_classes)
        sized = not any(kind == 'size' for kind, _ in problems)  # else every mask would be named
        if sized and any('mask' in inst for inst in info['instances']):
            problems += check_masks(info, max_overlap)
        return problems
    if 'seg_map_path' in info:
        try:
            LoadSegAnnotations()(dict(info, **results))
        except (ValueError, FileNotFoundError) as e:
            return [('label map', str(e))]
    return []


def check_split(name, dataset_cfg, args):
    """Build one split's dataset and check every image; returns (images, problems)."""
    dataset_type = dataset_cfg.get('type')
    if isinstance(dataset_type, str):
        dataset_type = DATASETS.get(dataset_type)
    if isinstance(dataset_type, type) and issubclass(dataset_type,
                                                     (CocoDataset, CocoPanopticDataset)):
        dataset_cfg = dict(dataset_cfg, collect_problems=True)  # list repeated ids, go on
    try:
        dataset = DATASETS.build(dataset_cfg)
        dataset.full_init()
    except (ValueError, FileNotFoundError, KeyError) as e:
        return 0, [('dataset', f'{name}: cannot build the dataset: {e}')]
    num_classes = len(dataset.metainfo.get('classes') or ())
    problems = [('dataset', line) for line in getattr(dataset, 'file_problems', None) or []]
    problems += [('box', f'{file}: {what}') for file, what in getattr(dataset, 'box_problems', [])]
    n, last = len(dataset), time.monotonic()
    def check(i):
        info = dataset.get_data_info(i)
        return check_one(info, num_classes, args.max_mask_overlap)

    with ThreadPoolExecutor(max(args.workers, 1)) as pool:
        for i, found in enumerate(pool.map(check, range(n))):
            problems += found
            if time.monotonic() - last >= args.progress_every:
                last = time.monotonic()
                print(f'{name}: {i + 1}/{n} images checked, {len(problems)} problems',
                      file=sys.stderr, flush=True)
    return n, problems


def summary_table(rows):
    header = ['split', 'images'] + list(KINDS)
    lines = [header] + [[name, str(n)] + [str(counts[k]) for k in KINDS] for name, n, counts in rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return '\n'.join('  '.join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in lines)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'densevit'))
    rows, total = [], 0
    for name in args.splits:
        loader = cfg.get(f'{name}_dataloader')
        if not loader:
            print(f'{name}: the config has no {name}_dataloader')
            continue
        n, problems = check_split(name, loader['dataset'], args)
        for kind, msg in problems:
            print(f'{name}: {kind}: {msg}')
        rows.append((name, n, collections.Counter(kind for kind, _ in problems)))
        total += len(problems)
    print(summary_table(rows))
    print(f'{total} problem{"s" if total != 1 else ""} found' if total else 'no problems found')
    return 1 if total else 0


if __name__ == '__main__':
    sys.exit(main())
