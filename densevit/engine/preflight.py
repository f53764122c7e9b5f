"""Check, before a run starts, that the files a config names exist.

A missing dataset or checkpoint otherwise surfaces minutes later as a traceback
from deep inside a data loader or weight loader; here it is one line saying what
is missing and where it goes.
"""
import os.path as osp


def _walk(node, path=''):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f'{path}.{k}' if path else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _walk(v, f'{path}[{i}]')


def _is_remote(path):
    return '://' in str(path)


def missing_inputs(cfg, resume=False,
                   loaders=('train_dataloader', 'val_dataloader', 'test_dataloader'),
                   pretrained=True):
    """Messages, one per missing annotation file or checkpoint named in ``cfg``.

    Args:
        resume (bool): ``load_from`` is the checkpoint to resume from.
        loaders (tuple[str]): the data loaders the run will build (a test needs
            only ``test_dataloader``).
        pretrained (bool): check ``init_cfg=dict(type='Pretrained')`` files; a test
            does not need them (its checkpoint replaces every weight, and the
            runner does not initialise weights before testing).
    """
    problems, seen = [], set()
    for key in loaders:
        loader = cfg.get(key)
        if not loader:
            continue
        for path, node in _walk(loader.get('dataset', {}), f'{key}.dataset'):
            ann = node.get('ann_file')
            if not ann or node.get('generate'):
                continue  # generated datasets make their own files
            full = osp.join(node.get('data_root') or '', ann)
            if not osp.exists(full) and full not in seen:
                seen.add(full)
                problems.append(
                    f'annotation file not found: {full} (from {path}.ann_file). Put the dataset '
                    f"under {node.get('data_root') or '.'} in the standard layout (see docs/datasets.md), "
                    f'or point data_root / ann_file at it with --cfg-options.')
    for path, node in _walk(cfg.get('model', {}) if pretrained else {}, 'model'):
        if node.get('type') == 'Pretrained' and node.get('checkpoint'):
            ckpt = node['checkpoint']
            if not _is_remote(ckpt) and not osp.exists(ckpt):
                problems.append(
                    f'pretrained checkpoint not found: {ckpt} (from {path}.checkpoint). Put the '
                    f'weights there (see docs/checkpoints.md), or train from scratch '
                    f'with --cfg-options {path}=None.')
    load_from = cfg.get('load_from')
    if load_from and not _is_remote(load_from) and not osp.exists(load_from):
        source = '--resume' if resume else 'load_from'
        problems.append(f'checkpoint not found: {load_from} (from {source}).')
    return problems
