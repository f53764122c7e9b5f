"""tools/dataset/check.py (issue #14, item 7): every data problem of a config, at once."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

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
    assert '4 problems found' in out
    assert 'train: 8/8 images checked, 4 problems' in captured.err  # the progress line
    table = [line.split() for line in out.splitlines() if line.split()[:1] in (['train'],
                                                                               ['val'])]
    assert ['train', '8', '1', '1', '2', '0', '0', '0'] in table
    assert ['val', '5', '0', '0', '0', '0', '0', '0'] in table


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
