"""Tiny COCO instance and panoptic files whose every pixel is written out by hand.

Imported by name by the tests of this folder (pytest puts a test's folder on the path).
"""
import json

import cv2
import numpy as np
from PIL import Image

# ---------------------------------------------------------------- instance masks: 10 x 12
H, W = 10, 12


def rect(rows, cols, h=H, w=W):
    """bool [h, w] with the given row and column ranges set."""
    m = np.zeros((h, w), bool)
    m[rows[0]:rows[1], cols[0]:cols[1]] = True
    return m


# a rectangle polygon [x0, x1] x [y0, y1] covers columns x0..x1-1 and rows y0..y1-1
POLYGON = [[1, 1, 5, 1, 5, 4, 1, 4]]
POLYGON_MASK = rect((1, 4), (1, 5))
# two polygons in one annotation: their union
TWO_POLYGONS = [[0, 8, 2, 8, 2, 10, 0, 10], [3, 8, 4, 8, 4, 9, 3, 9]]
TWO_POLYGONS_MASK = rect((8, 10), (0, 2)) | rect((8, 9), (3, 4))
# uncompressed RLE: column-major runs starting with 0; pixels (6, 8), (7, 8), (6, 9), (7, 9)
# are column-major indices 8 * 10 + 6 = 86, 87, 96, 97
RLE = dict(size=[H, W], counts=[86, 2, 8, 2, 22])
RLE_MASK = rect((6, 8), (8, 10))


def write_instances(root, annotations, width=W, height=H):
    """One black image ``img.png`` and ``ann.json`` with ``annotations`` (category 1)."""
    (root / 'imgs').mkdir(exist_ok=True)
    cv2.imwrite(str(root / 'imgs' / 'img.png'), np.zeros((height, width, 3), np.uint8))
    data = dict(images=[dict(id=1, file_name='img.png', width=width, height=height)],
                annotations=annotations, categories=[dict(id=1, name='thing')])
    (root / 'ann.json').write_text(json.dumps(data))
    return str(root / 'ann.json')


def ann(ann_id, bbox, segmentation, iscrowd=0):
    return dict(id=ann_id, image_id=1, category_id=1, bbox=bbox, iscrowd=iscrowd,
                segmentation=segmentation)


# ---------------------------------------------------------------- panoptic: 6 x 8
PH, PW = 6, 8
# category ids interleaved and unsorted: labels are things by id (person 0, car 1), then
# stuff by id (sky 2, road 3)
CATEGORIES = [dict(id=7, name='sky', isthing=0), dict(id=2, name='person', isthing=1),
              dict(id=20, name='road', isthing=0), dict(id=5, name='car', isthing=1)]
CLASSES = ('person', 'car', 'sky', 'road')
# segment id -> its colour (R, G, B), written out: id = R + 256 G + 65536 B
COLOURS = {300: (44, 1, 0), 70000: (112, 17, 1), 5: (5, 0, 0), 9: (9, 0, 0), 12: (12, 0, 0)}
SEGMENTS = [dict(id=300, category_id=7, iscrowd=0),     # sky, rows 0-1 (VOID at (0, 0))
            dict(id=70000, category_id=2, iscrowd=0),   # a person: rows 2-4, columns 1-2
            dict(id=5, category_id=5, iscrowd=0),       # a car: rows 3-5, columns 5-7
            dict(id=9, category_id=2, iscrowd=1),       # a crowd of persons: row 5, columns 0-1
            dict(id=12, category_id=20, iscrowd=0)]     # road: the rest of rows 2-5
IDS = np.array([[0, 300, 300, 300, 300, 300, 300, 300],
                [300, 300, 300, 300, 300, 300, 300, 300],
                [12, 70000, 70000, 12, 12, 12, 12, 12],
                [12, 70000, 70000, 12, 12, 5, 5, 5],
                [12, 70000, 70000, 12, 12, 5, 5, 5],
                [9, 9, 12, 12, 12, 5, 5, 5]])
# expected, by hand: semantic labels (VOID 255; the crowd keeps its class) ...
SEM = np.array([[255, 2, 2, 2, 2, 2, 2, 2],
                [2, 2, 2, 2, 2, 2, 2, 2],
                [3, 0, 0, 3, 3, 3, 3, 3],
                [3, 0, 0, 3, 3, 1, 1, 1],
                [3, 0, 0, 3, 3, 1, 1, 1],
                [0, 0, 3, 3, 3, 1, 1, 1]])
# ... and label + instance * 1000: the person is instance 1, the car 2, the crowd and stuff
# instance 0, VOID num_classes (4)
PAN = np.array([[4, 2, 2, 2, 2, 2, 2, 2],
                [2, 2, 2, 2, 2, 2, 2, 2],
                [3, 1000, 1000, 3, 3, 3, 3, 3],
                [3, 1000, 1000, 3, 3, 2001, 2001, 2001],
                [3, 1000, 1000, 3, 3, 2001, 2001, 2001],
                [0, 0, 3, 3, 3, 2001, 2001, 2001]])


def write_png(path, ids):
    """The RGB PNG of a segment id map, colours from :data:`COLOURS` (0 black)."""
    rgb = np.zeros((*ids.shape, 3), np.uint8)
    for seg_id, colour in COLOURS.items():
        rgb[ids == seg_id] = colour
    Image.fromarray(rgb, 'RGB').save(path)


def write_panoptic(root, ids=IDS, segments=None, categories=None, images=None):
    """``img/a.png`` (black), ``pan/a.png`` (from ``ids``) and ``pan.json``."""
    for folder in ('img', 'pan'):
        (root / folder).mkdir(exist_ok=True)
    cv2.imwrite(str(root / 'img' / 'a.png'), np.zeros((PH, PW, 3), np.uint8))
    if ids is not None:
        write_png(root / 'pan' / 'a.png', ids)
    data = dict(images=images or [dict(id=3, file_name='a.png', width=PW, height=PH)],
                annotations=[dict(image_id=3, file_name='a.png',
                                  segments_info=SEGMENTS if segments is None else segments)],
                categories=CATEGORIES if categories is None else categories)
    (root / 'pan.json').write_text(json.dumps(data))
    return str(root / 'pan.json')


def panoptic_dataset(root, pipeline=(), **kwargs):
    from densevit.datasets.coco_panoptic import CocoPanopticDataset
    return CocoPanopticDataset(ann_file='pan.json', data_root=str(root),
                               data_prefix=dict(img='img/', seg='pan/'), pipeline=list(pipeline),
                               **kwargs)
