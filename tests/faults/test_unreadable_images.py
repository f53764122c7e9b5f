"""Missing or corrupt images.

- By default the first unreadable image stops training (or testing) with one line
  naming it, also when a DataLoader worker met it: no worker traceback.
- ``skip_unreadable=True`` trains past them, for detection and segmentation: one
  line at the first skip, then one count per epoch naming the files.
- Evaluation never skips: in ``test_mode`` the dataset still raises.
"""
import re
from pathlib import Path

import cv2
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope

from densevit.datasets.transforms.loading import ImageNotFoundError, UnreadableImageError
from densevit.datasets.unreadable import SKIPPED_KEY
from densevit.registry import DATASETS

from tiny_run import isolated, load_tool, unique_names, write_config, write_seg_config

NO_VAL = ['train_cfg.val_begin=1000']
WORKER = ['train_dataloader.num_workers=1']  # the error crosses a DataLoader worker


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


def build(config, loader='train_dataloader', **overrides):
    """The dataset of ``loader`` in ``config`` (generated on first use)."""
    init_default_scope('densevit')
    cfg = Config.fromfile(config)[loader]['dataset']
    cfg.update(overrides)
    return DATASETS.build(cfg)


def break_image(dataset, idx, how='corrupt'):
    """Make image ``idx`` of ``dataset`` undecodable (or missing); return its path."""
    path = Path(dataset.get_data_info(idx)['img_path'])
    if how == 'missing':
        path.unlink()
    else:
        path.write_bytes(b'\x89PNG\r\n\x1a\n not an image')
    return path


def test_missing_image_stops_training_with_one_line(train_tool, tmp_path, capsys):
    config = write_config(tmp_path)
    missing = break_image(build(config), 3, how='missing')
    with isolated():
        rc = train_tool.main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                              *NO_VAL, *WORKER, *unique_names()])
    err = capsys.readouterr().err
    assert rc == 1
    assert f'densevit: image not found: {missing}. List every unreadable image with ' \
           'tools/dataset/check.py CONFIG' in err
    assert 'Traceback' not in err and 'worker' not in err


def skip_config(tmp_path, seg=False, extra=''):
    """A tiny config whose training set skips unreadable images (one DataLoader worker)."""
    text = ('train_dataloader = dict(num_workers=1, dataset=dict(data_root=data_root, '
            f'skip_unreadable=True){extra})\n')
    return (write_seg_config if seg else write_config)(tmp_path, extra=text, name='skip.py')


def skip_lines(work_dir):
    (log,) = Path(work_dir).glob('*/*.log')
    return [line for line in log.read_text().splitlines() if 'skip_unreadable:' in line]


def test_detection_skips_unreadable_images_with_a_count(train_tool, tmp_path):
    config = skip_config(tmp_path)
    broken = break_image(build(config), 3)
    with isolated():  # 4 iterations x batch 2: one pass over the 8 images
        assert train_tool.main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                                *NO_VAL, *unique_names()]) == 0
    first, count = skip_lines(tmp_path / 'w')  # two lines, however many skips
    assert f'skipping an unreadable image: cannot decode image: {broken}' in first
    n = int(re.search(r'skip_unreadable: (\d+) unreadable images skipped in training '
                      r'\(1 files\)', count)[1])
    assert n >= 1 and str(broken) in count
    assert (tmp_path / 'w' / 'iter_4.pth').is_file()


EPOCHS = """, sampler=dict(_delete_=True, type='DefaultSampler', shuffle=True))
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs=2, val_interval=100)
default_hooks = dict(checkpoint=dict(by_epoch=True, interval=2)"""  # closes the dict above


def test_segmentation_skips_unreadable_images_with_a_count_per_epoch(train_tool, tmp_path):
    config = skip_config(tmp_path, seg=True, extra=EPOCHS)
    broken = break_image(build(config), 5)
    with isolated():
        assert train_tool.main([config, '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', *unique_names()]) == 0
    first, *counts = skip_lines(tmp_path / 'w')
    assert f'skipping an unreadable image: cannot decode image: {broken}' in first
    assert len(counts) == 2  # every epoch draws every image once
    for epoch, line in enumerate(counts, 1):
        assert re.search(rf'unreadable images skipped in epoch {epoch} \(1 files\)', line)


@pytest.mark.parametrize('seg', [False, True])
def test_skipped_image_is_replaced_and_evaluation_never_skips(tmp_path, seg):
    config = skip_config(tmp_path, seg=seg)
    train = build(config)
    broken = break_image(train, 2)
    sample = train[2]  # another image, carrying the skip with it
    assert sample['data_samples'].img_path != str(broken)
    assert sample['data_samples'].metainfo[SKIPPED_KEY] == (
        f'cannot decode image: {broken} (corrupt or not an image)',)
    assert SKIPPED_KEY not in train[0]['data_samples'].metainfo
    plain = build(config, skip_unreadable=False)
    with pytest.raises(UnreadableImageError, match=f'cannot decode image: {broken}'):
        plain[2]
    val = build(config, 'val_dataloader', skip_unreadable=True)
    missing = break_image(val, 1, how='missing')
    with pytest.raises(ImageNotFoundError, match=f'image not found: {missing}'):
        val[1]


def corrupt_one_train_image(data_root):
    """Overwrite train image 000003.png with bytes that are not an image."""
    path = Path(data_root) / 'train' / '000003.png'
    path.write_bytes(b'\x89PNG\r\n\x1a\n garbage, not an image')
    return path


SKIP_BROKEN = """
train_dataloader = dict(dataset=dict(data_root=data_root, pipeline=[
    dict(type='LoadImage', ignore_empty=True), dict(type='LoadDetAnnotations'),
    dict(type='PackDetInputs')]))
"""


def test_corrupt_image_is_named_or_skipped_with_a_warning(train_tool, tmp_path, capsys):
    from mmengine.registry import init_default_scope

    from densevit.registry import DATASETS
    config = write_config(tmp_path, extra=SKIP_BROKEN)
    with isolated():  # generate the data, then break one image in the middle
        init_default_scope('densevit')
        from mmengine.config import Config
        DATASETS.build(Config.fromfile(config).train_dataloader.dataset)
    broken = corrupt_one_train_image(tmp_path / 'shapes')
    assert cv2.imread(str(broken)) is None

    strict = write_config(tmp_path, name='strict.py')  # LoadImage without ignore_empty
    with isolated():
        assert train_tool.main([strict, '--work-dir', str(tmp_path / 'strict'), '--cfg-options',
                                *NO_VAL, *unique_names()]) == 1
    assert f'densevit: cannot decode image: {broken}' in capsys.readouterr().err

    # 4 iterations x batch 2 = one shuffled pass over the 8 images: the broken one is drawn
    with isolated():
        assert train_tool.main([config, '--work-dir', str(tmp_path / 'skip'), '--cfg-options',
                                *NO_VAL, *unique_names()]) == 0
    (log,) = (tmp_path / 'skip').glob('*/*.log')
    assert f'LoadImage: skipping image {broken}: cannot be decoded' in log.read_text()
    assert (tmp_path / 'skip' / 'iter_4.pth').is_file()
