"""Tiny trained checkpoints (detector and segmentor) shared by the tests of a session.

Each is trained once per pytest session (4 iterations, in-process) into the session's
base temporary folder and reused by every later caller, whichever test module asks. The
4-iteration detector scores AP 0 on its real validation boxes; :func:`easy_ground_truth`
makes a ground truth it scores well on, for comparisons that must not be of zeros.
"""
import json
import os
from pathlib import Path

import torch

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


def easy_ground_truth(ann_file, dets_file, out_file, num_replaced=3):
    """The val annotations with the boxes of the first images replaced by the model's own
    top detection: the untrained model then scores a non-trivial AP (0 < AP < 1)."""
    gt = json.loads(Path(ann_file).read_text())
    dets = json.loads(Path(dets_file).read_text())
    replaced = sorted(img['id'] for img in gt['images'])[:num_replaced]
    anns = [a for a in gt['annotations'] if a['image_id'] not in replaced]
    for img_id in replaced:
        best = max((d for d in dets if d['image_id'] == img_id), key=lambda d: d['score'])
        x, y, w, h = best['bbox']
        anns.append(dict(id=10_000 + img_id, image_id=img_id, category_id=best['category_id'],
                         bbox=[x, y, w, h], area=w * h, iscrowd=0))
    gt['annotations'] = anns
    Path(out_file).write_text(json.dumps(gt))


class PicklePayload:
    """Unpickling this runs a shell command (the classic malicious checkpoint)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


def save_evil_checkpoint(path, marker):
    """A checkpoint at ``path`` whose unpickling would create ``marker``."""
    torch.save({'state_dict': {'w': torch.zeros(1)}, 'meta': PicklePayload(marker)}, path)
    return path
