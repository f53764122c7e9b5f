"""tools/dataset/check.py on instance masks and COCO panoptic data: one line per problem,
naming the file, and exit status 1."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from hand_fixtures import (
    IDS,
    PH,
    POLYGON,
    PW,
    RLE,
    SEGMENTS,
    ann,
    write_instances,
    write_panoptic,
    write_png,
)

from tiny_run import load_tool

REPO = Path(__file__).parents[2]


@pytest.fixture(scope='module')
def check_tool():
    return load_tool('tools/dataset/check.py')


def write_config(tmp_path, dataset):
    path = tmp_path / 'check_cfg.py'
    path.write_text(f"default_scope = 'densevit'\ntrain_dataloader = dict(dataset={dataset!r})\n")
    return str(path)


def run(check_tool, config, capsys, *args):
    status = check_tool.main([config, '--splits', 'train', '--progress-every', '1000', *args])
    return status, capsys.readouterr().out


def instances_config(tmp_path):
    return write_config(tmp_path, dict(type='CocoDataset', data_root=str(tmp_path),
                                       ann_file='ann.json', data_prefix=dict(img='imgs/')))


def test_instance_mask_problems(check_tool, tmp_path, capsys):
    config = instances_config(tmp_path)
    write_instances(tmp_path, [ann(1, [1, 1, 4, 3], POLYGON), ann(2, [8, 6, 2, 2], RLE)])
    status, out = run(check_tool, config, capsys)
    assert status == 0 and 'no problems found' in out
    write_instances(tmp_path, [
        ann(1, [1, 1, 4, 3], POLYGON),
        ann(2, [3, 1, 4, 3], [[3, 1, 7, 1, 7, 4, 3, 4]]),      # half of 1 and of itself shared
        ann(3, [8, 6, 2, 2], dict(RLE, size=[10, 11])),         # RLE of another size
        ann(4, [9, 0, 3, 3], [[9, 0, 14, 0, 14, 3, 9, 3]]),     # 2 px past the right border
        ann(5, [0, 6, 3, 1], [[0, 6, 1, 6, 2, 6]]),             # a flat triangle: no pixel
        dict(id=6, image_id=1, category_id=1, bbox=[0, 8, 2, 2]),  # no segmentation
        ann(7, [0, 0, 12, 10], [[0, 0, 12, 0, 12, 10, 0, 10]], iscrowd=1)])  # crowd: may overlap
    status, out = run(check_tool, config, capsys)
    img = f'{tmp_path}/imgs/img.png'
    assert status == 1
    expected = [
        f'train: mask: {img}: annotation 3: RLE size [10, 11] (height, width) is not its '
        "image's [10, 12]",
        f'train: mask: {img}: annotation 6 has no segmentation',
        f'train: mask: {img}: annotation 4: a polygon vertex lies 2.0 pixels outside the 12x10 '
        'image',
        f'train: mask: {img}: annotation 5: its mask is empty',
        f'train: mask: {img}: annotation 1 and annotation 2 overlap on 50.0% of the smaller mask '
        '(more than 1.0%)']
    for line in expected:
        assert line in out
    assert '5 problems found' in out
    status, out = run(check_tool, config, capsys, '--max-mask-overlap', '0.6')
    assert 'overlap' not in out and '4 problems found' in out


def write_panoptic_set(root):
    """Four images: a.png clean, b.png's PNG one row short, c.png's PNG missing, d.png's PNG
    without the car and with an unlisted id 9 (crowd left out of segments_info)."""
    write_panoptic(root)
    data = json.loads((root / 'pan.json').read_text())
    for i, name in enumerate('bcd', 4):
        cv2.imwrite(str(root / 'img' / f'{name}.png'), np.zeros((PH, PW, 3), np.uint8))
        data['images'].append(dict(id=i, file_name=f'{name}.png', width=PW, height=PH))
        segments = [s for s in SEGMENTS if s['id'] != 9] if name == 'd' else SEGMENTS
        data['annotations'].append(dict(image_id=i, file_name=f'{name}.png',
                                        segments_info=segments))
    write_png(root / 'pan' / 'b.png', IDS[1:])  # every segment still there
    write_png(root / 'pan' / 'd.png', np.where(IDS == 5, 12, IDS))
    (root / 'pan.json').write_text(json.dumps(data))


def panoptic_config(tmp_path):
    return write_config(tmp_path, dict(type='CocoPanopticDataset', data_root=str(tmp_path),
                                       ann_file='pan.json',
                                       data_prefix=dict(img='img/', seg='pan/')))


def test_panoptic_problems(check_tool, tmp_path, capsys):
    write_panoptic_set(tmp_path)
    status, out = run(check_tool, panoptic_config(tmp_path), capsys)
    pan = f'{tmp_path}/pan'
    assert status == 1
    for line in [
            f'train: panoptic: panoptic PNG {pan}/b.png is 5x8 (HxW) but its image '
            f'{tmp_path}/img/b.png is 6x8',
            f'train: panoptic: panoptic PNG not found: {pan}/c.png',
            f'train: panoptic: panoptic PNG {pan}/d.png: segment ids 5 of its segments_info are '
            'absent from the PNG',
            f'train: panoptic: panoptic PNG {pan}/d.png holds segment ids 9 that its '
            'segments_info does not list']:
        assert line in out
    assert f'{pan}/a.png' not in out and '4 problems found' in out
    table = [line.split() for line in out.splitlines() if line.startswith('train ')]
    # split, images, then image size box label "label map" mask panoptic dataset
    assert table == [['train', '4', '0', '0', '0', '0', '0', '0', '4', '0']]


def test_panoptic_category_without_isthing(check_tool, tmp_path, capsys):
    write_panoptic(tmp_path)
    data = json.loads((tmp_path / 'pan.json').read_text())
    del data['categories'][2]['isthing']
    (tmp_path / 'pan.json').write_text(json.dumps(data))
    status, out = run(check_tool, panoptic_config(tmp_path), capsys)
    assert status == 1
    assert (f'train: dataset: train: cannot build the dataset: {tmp_path}/pan.json: categories '
            'without "isthing": 20 (road)') in out


def test_generated_panoptic_shapes_are_clean(check_tool, tmp_path, capsys):
    base = REPO / 'configs' / '_base_' / 'datasets' / 'shapes_panoptic.py'
    config = tmp_path / 'shapes_cfg.py'
    config.write_text(f"_base_ = [{str(base)!r}]\ndefault_scope = 'densevit'\n"
                      f"data_root = '{tmp_path}/'\n"
                      "train_dataloader = dict(dataset=dict(data_root=data_root, "
                      "generate=dict(num_images=6)))\n")
    status, out = run(check_tool, str(config), capsys)
    assert (status, out.splitlines()[-1]) == (0, 'no problems found')
