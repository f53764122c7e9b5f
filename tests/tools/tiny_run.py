"""Helpers for tests that run tools/train.py and tools/test.py in-process on tiny_detr_shapes.

pytest.ini puts this folder on the import path (``pythonpath = tests/tools``);
tests/tools, tests/engine and tests/apis conftests re-export :func:`isolated_run_state`,
so they share it without tests/ being a package.
"""
import contextlib
import importlib.util
import itertools
import json
import os
from pathlib import Path

import pytest
import torch
from mmengine.logging import MessageHub, MMLogger
from mmengine.registry import DefaultScope
from mmengine.visualization import Visualizer

REPO = Path(__file__).resolve().parents[2]
TINY_CONFIG = REPO / 'tests' / 'configs' / 'tiny_detr_shapes.py'
_run_ids = itertools.count()


def load_tool(relpath):
    """Import a script such as ``tools/train.py`` as a module (tools/ is not a package)."""
    path = REPO / relpath
    name = 'densevit_tool_' + relpath.replace('/', '_').replace('.py', '')
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_config(tmp_path, data_root=None, extra='', name='tiny.py'):
    """A config inheriting tiny_detr_shapes.py with its data under ``data_root``.

    ``data_root`` defaults to ``tmp_path/shapes`` (generated on first use). The base's
    paths derived from its own data_root are re-derived here; ``extra`` is appended.
    """
    data_root = Path(data_root or Path(tmp_path) / 'shapes').as_posix().rstrip('/') + '/'
    text = f"""
_base_ = [{str(TINY_CONFIG)!r}]
data_root = {data_root!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
""" + extra
    path = Path(tmp_path) / name
    path.write_text(text)
    return str(path)


def unique_names():
    """``--cfg-options`` giving a run its own experiment and visualizer names.

    mmengine keys its logger, message hub and visualizer by name, process-wide:
    two runners started in the same second (same timestamp) or sharing the config's
    visualizer name would otherwise write to the first one's log and vis_data dirs.
    """
    i = next(_run_ids)
    return [f'experiment_name=densevit_test_{i}', f'visualizer.name=densevit_test_vis_{i}']


def scalar_records(work_dir):
    """Every record of every run's ``<timestamp>/vis_data/scalars.json`` under ``work_dir``."""
    records = []
    for path in sorted(Path(work_dir).glob('*/vis_data/scalars.json')):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def train_losses(work_dir):
    """{iteration: loss} from the training records (last run wins for an iteration)."""
    return {r['step']: r['loss'] for r in scalar_records(work_dir) if 'loss' in r}


def _manager_classes():
    """mmengine's name-keyed singletons a Runner creates, with every visualizer subclass."""
    classes, todo = [MMLogger, MessageHub, DefaultScope], [Visualizer]
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo += cls.__subclasses__()
    return classes


@contextlib.contextmanager
def isolated():
    """One torch thread; undo what a Runner leaves behind in the process.

    - Threads: on a busy 2-core machine two torch threads contend and a tiny
      iteration takes 30x longer.
    - ``randomness.deterministic`` makes mmengine call
      ``torch.use_deterministic_algorithms(True)`` and set CUBLAS_WORKSPACE_CONFIG
      for the whole process; restored so other tests see the defaults.
    - Loggers (open log files), message hubs, default scopes and visualizers
      created by the test are dropped.
    """
    threads = torch.get_num_threads()
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    cublas = os.environ.get('CUBLAS_WORKSPACE_CONFIG')
    before = {cls: set(cls._instance_dict) for cls in _manager_classes()}
    torch.set_num_threads(1)
    try:
        yield
    finally:
        _restore(threads, deterministic, cublas, before)


def _restore(threads, deterministic, cublas, before):
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    if cublas is None:
        os.environ.pop('CUBLAS_WORKSPACE_CONFIG', None)
    else:
        os.environ['CUBLAS_WORKSPACE_CONFIG'] = cublas
    for cls in _manager_classes():
        for name in set(cls._instance_dict) - before.get(cls, set()):
            instance = cls._instance_dict.pop(name)
            if isinstance(instance, MMLogger):
                for handler in list(instance.handlers):
                    handler.close()
                    instance.removeHandler(handler)


@pytest.fixture(autouse=True)
def isolated_run_state():
    """:func:`isolated` around every test."""
    with isolated():
        yield


TINY_SEG_CONFIG = REPO / 'tests' / 'configs' / 'tiny_segformer_shapes.py'


def write_seg_config(tmp_path, data_root=None, extra='', name='tiny_seg.py'):
    """A config inheriting tiny_segformer_shapes.py with its data under ``data_root``
    (default ``tmp_path/shapes_seg``, generated on first use); ``extra`` is appended."""
    data_root = Path(data_root or Path(tmp_path) / 'shapes_seg').as_posix().rstrip('/') + '/'
    text = f"""
_base_ = [{str(TINY_SEG_CONFIG)!r}]
data_root = {data_root!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
""" + extra
    path = Path(tmp_path) / name
    path.write_text(text)
    return str(path)


def tiny_seg_data(data_root, img_size, min_size, max_size, num_images=4):
    """Config lines that give a shapes segmentation config (``ShapesSegDataset``) tiny
    generated data under ``data_root``: ``num_images`` of ``img_size`` a side per split, at most
    two shapes of ``min_size``-``max_size`` pixels, batches of 2 in this process."""
    return f"""
data_root = {str(data_root)!r} + '/'
tiny = dict(num_images={num_images}, img_size=({img_size}, {img_size}), max_objects=2,
            min_size={min_size}, max_size={max_size})
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, generate=dict(tiny, seed=0)))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, generate=dict(tiny, seed=1)))
test_dataloader = val_dataloader
"""


def free_port():
    """A TCP port nobody listens on now (for torchrun's rendezvous)."""
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def subprocess_env(*paths, **extra):
    """``os.environ`` for a child process: one torch thread, ``REPO`` and ``paths`` ahead of
    any PYTHONPATH already set (where the dependencies may live), then ``extra``."""
    path = [str(REPO), *map(str, paths), *filter(None, [os.environ.get('PYTHONPATH')])]
    return dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1',
                PYTHONPATH=os.pathsep.join(path), **extra)


def run_launcher(script, *args, cwd, timeout=300):
    """Run ``tools/<script>`` (a .sh launcher) in a subprocess; returns CompletedProcess.

    Workers get one torch thread each, tests/tools on PYTHONPATH (for ``probe_hooks``)
    and their own rendezvous port. ``cwd`` takes mmengine's ``.dist_test`` folder
    (collect_results writes the ranks' parts there).
    """
    import subprocess
    env = subprocess_env(REPO / 'tests' / 'tools', PORT=str(free_port()))
    proc = subprocess.run(['bash', str(REPO / 'tools' / script), *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f'{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}'
    return proc


def unlabelled_data(root, crop, skip_unreadable=False):
    """Config lines: the pre-training configs' data (``UnlabelledImageDataset``) read from
    ``root/train/`` (random crops of ``crop`` pixels, flips) and ``root/val/`` (whole images),
    batches of 2 in this process."""
    root = Path(root).as_posix().rstrip('/') + '/'
    return f"""
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    _delete_=True, type='UnlabelledImageDataset', data_root={root!r},
    data_prefix=dict(img_path='train/'), skip_unreadable={skip_unreadable!r},
    pipeline=[dict(type='LoadImage'), dict(type='RandomResizedCrop', size={crop}, scale=(0.2, 1.0)),
              dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs')]))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    _delete_=True, type='UnlabelledImageDataset', data_root={root!r},
    data_prefix=dict(img_path='val/'), test_mode=True,
    pipeline=[dict(type='LoadImage'), dict(type='PackDetInputs')]))
test_dataloader = val_dataloader
"""


def save_pretraining_model(model_cfg, path, iteration):
    """Build a pre-training model (MAE, masked patch prediction, BEiT) from ``model_cfg``, draw
    its encoder at random (seed 3) and save it as the Runner saves a checkpoint at
    ``iteration``; returns its state dict."""
    from densevit.registry import MODELS
    from densevit.utils.random_init import randomize_
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(model_cfg)
    model.init_weights()
    randomize_(model.backbone, seed=3)
    sd = model.state_dict()
    torch.save({'meta': {'iter': iteration}, 'state_dict': sd}, path)
    return sd


def built_from_checkpoint(model_cfg, checkpoint):
    """A detector / segmentor config built with its backbone's ``init_cfg`` checkpoint set to
    ``checkpoint`` and its weights initialised (so loaded from that file)."""
    from densevit.registry import MODELS
    model_cfg.backbone.init_cfg.checkpoint = str(checkpoint)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(model_cfg)
    model.init_weights()
    return model
