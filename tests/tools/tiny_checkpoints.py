"""Tiny trained checkpoints (detector and segmentor) shared by the tests of a session.

Each is trained once per pytest session (4 iterations, in-process) into the session's
base temporary folder and reused by every later caller, whichever test module asks.
"""
from pathlib import Path

from tiny_run import isolated, load_tool, unique_names, write_config, write_seg_config


def trained_checkpoint(tmp_path_factory, kind):
    """dict(config, ckpt, data_root) of the tiny ``kind`` ('det' or 'seg') model."""
    root = Path(tmp_path_factory.getbasetemp()) / f'tiny_{kind}_trained'
    writer = write_config if kind == 'det' else write_seg_config
    ckpt = root / 'work' / 'iter_4.pth'
    if not ckpt.is_file():
        root.mkdir(parents=True, exist_ok=True)
        config = writer(root)
        with isolated():
            rc = load_tool('tools/train.py').main([
                config, '--work-dir', str(root / 'work'), '--cfg-options',
                'train_cfg.val_begin=100', *unique_names()])
        assert rc == 0
    config = str(root / ('tiny.py' if kind == 'det' else 'tiny_seg.py'))
    data_root = root / ('shapes' if kind == 'det' else 'shapes_seg')
    return dict(config=config, ckpt=str(ckpt), data_root=data_root, root=root)


def val_images(run, n=None):
    """The first ``n`` (all: None) validation images of a :func:`trained_checkpoint` run."""
    root = Path(run['data_root'])
    folder = 'val' if (root / 'val').is_dir() else 'images/validation'
    return sorted((root / folder).glob('*.png'))[:n]
