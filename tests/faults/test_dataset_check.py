"""tools/dataset/check.py: every data problem of a config, at once."""
import collections
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from tiny_run import load_tool, write_config, write_seg_config


@pytest.fixture(scope='module')
def check_tool():
    return load_tool('tools/dataset/check.py')


def test_check_lists_every_detection_problem(check_tool, tmp_path, capsys):
    config = write_config(tmp_path)
    assert check_tool.main([config]) == 0  # generates the data; all clean
    assert 'no problems found' in capsys.readouterr().out
    root = tmp_path / 'shapes'
    (root / 'train' / '000003.png').write_bytes(b'not an image')
    ann_path = root / 'annotations' / 'instances_train.json'
    ann = json.loads(ann_path.read_text())
    ann['images'][1]['width'] += 10
    ann['annotations'] += [dict(id=900, image_id=ann['images'][0]['id'], category_id=1,
                                bbox=[5, 5, 0, 10]),
                           dict(id=901, image_id=ann['images'][2]['id'], category_id=2,
                                bbox=[40, 40, 30, 30])]
    ann_path.write_text(json.dumps(ann))
    assert check_tool.main([config, '--progress-every', '0']) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert f'train: image: cannot decode image: {root}/train/000003.png' in out
    assert f'train: size: {root}/train/000001.png: image is 48x48 but its annotation says ' \
           '58x48' in out
    assert 'train: box: 000000.png: annotation 900: box [5, 5, 0, 10] has zero or negative ' \
           'width/height' in out
    assert 'train: box: 000002.png: annotation 901: box [40, 40, 30, 30] extends past the ' \
           '48x48 image (clipped)' in out
    # the generated annotations have masks (RLE), the added one none
    assert f'train: mask: {root}/train/000002.png: annotation 901 has no segmentation' in out
    assert '5 problems found' in out
    assert 'train: 8/8 images checked, 5 problems' in captured.err  # the progress line
    table = [line.split() for line in out.splitlines() if line.split()[:1] in (['train'],
                                                                               ['val'])]
    # image size box label "label map" mask panoptic dataset
    assert ['train', '8', '1', '1', '2', '0', '0', '1', '0', '0'] in table
    assert ['val', '5', '0', '0', '0', '0', '0', '0', '0', '0'] in table


def test_check_lists_every_segmentation_problem(check_tool, tmp_path, capsys):
    config = write_seg_config(tmp_path)
    assert check_tool.main([config, '--splits', 'val']) == 0
    capsys.readouterr()
    labels = tmp_path / 'shapes_seg' / 'annotations' / 'validation'
    cv2.imwrite(str(labels / '000001.png'), np.full((48, 48), 9, np.uint8))
    cv2.imwrite(str(labels / '000002.png'), np.zeros((40, 48), np.uint8))
    assert check_tool.main([config, '--splits', 'val']) == 1
    out = capsys.readouterr().out
    assert f'val: label map: label map {labels}/000001.png has values 9 outside 0..3' in out
    assert f'val: label map: label map {labels}/000002.png is 40x48 (HxW) but its image' in out
    assert Path(labels / '000000.png').name not in out
    assert '2 problems found' in out


def test_check_lists_repeated_ids_crowd_and_exif_and_goes_on(check_tool, tmp_path, capsys):
    """Repeated image and annotation ids and an all-crowd training file are listed (the
    dataset alone refuses them), and every image is still checked: a JPEG whose EXIF
    orientation fits neither frame of its annotation is named as such, a corrupt one too."""
    config = write_config(tmp_path)
    assert check_tool.main([config, '--splits', 'train']) == 0
    capsys.readouterr()
    root = tmp_path / 'shapes'
    ann_path = root / 'annotations' / 'instances_train.json'
    ann = json.loads(ann_path.read_text())
    first, second = ann['images'][1], ann['images'][2]
    per_image = collections.Counter()
    for a in ann['annotations']:
        a['image_id'] = first['id'] if a['image_id'] == second['id'] else a['image_id']
        per_image[a['image_id']] += 1
        a['id'], a['iscrowd'] = per_image[a['image_id']], 1
    second['id'] = first['id']
    ann_path.write_text(json.dumps(ann))
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new('RGB', (48, 40)).save(root / 'train' / '000003.png', format='JPEG',
                                    exif=exif.tobytes())
    (root / 'train' / '000005.png').write_bytes(b'not an image')
    assert check_tool.main([config, '--splits', 'train']) == 1
    out = capsys.readouterr().out
    assert (f'train: dataset: {ann_path}: image ids used by more than one image: '
            f'id {first["id"]} (000001.png, 000002.png); ') in out
    assert f'train: dataset: {ann_path}: annotation ids used by more than one annotation: ' \
           'id 1 (' in out
    assert f'train: dataset: {ann_path}: no trainable box in its 8 images' in out
    assert (f'train: size: {root}/train/000003.png: image is 48x40 as stored and 40x48 with its '
            'EXIF orientation 6 applied, but its annotation says 48x48') in out
    assert f'train: image: cannot decode image: {root}/train/000005.png' in out
    assert '5 problems found' in out
