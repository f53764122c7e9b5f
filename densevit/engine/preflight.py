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
        pretrained (bool): check ``init_cfg=dict(type='Pretrained')`` files and that a
            second stage on a frozen detector (``model.freeze_detector``) has a
            ``load_from``; a test needs neither (its checkpoint replaces every weight, and
            the runner does not initialise weights before testing).
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
        if node.get('type') == 'KMeansTokenizer' and node.get('checkpoint') \
                and not osp.exists(node['checkpoint']):  # BEiT's visual tokenizer
            problems.append(
                f"tokenizer file not found: {node['checkpoint']} (from {path}.checkpoint). Make "
                f'it with tools/pretrain/make_tokenizer.py (docs/pretraining.md).')
    load_from = cfg.get('load_from')
    if load_from and not _is_remote(load_from) and not osp.exists(load_from):
        source = '--resume' if resume else 'load_from'
        problems.append(f'checkpoint not found: {load_from} (from {source}).')
    model = cfg.get('model') or {}
    if pretrained and not resume and not load_from and model.get('freeze_detector'):
        # a second stage (DETRPanoptic's mask head) on a frozen, never-trained detector
        problems.append(
            f"model.freeze_detector=True trains the {model.get('type')}'s mask head alone on a "
            'frozen detector, but no load_from gives that detector its weights: train the '
            'first stage and set load_from to its checkpoint (docs/detr_family.md).')
    return problems


# the top-level keys mmengine's Runner reads (Runner.__init__ and Runner.from_cfg)
RUNNER_KEYS = ('model', 'work_dir', 'train_dataloader', 'val_dataloader', 'test_dataloader',
               'train_cfg', 'val_cfg', 'test_cfg', 'auto_scale_lr', 'optim_wrapper',
               'param_scheduler', 'val_evaluator', 'test_evaluator', 'default_hooks',
               'custom_hooks', 'data_preprocessor', 'load_from', 'resume', 'launcher', 'env_cfg',
               'log_processor', 'log_level', 'visualizer', 'default_scope', 'randomness',
               'experiment_name', 'model_wrapper_cfg', 'custom_imports')


def misspelt_keys(cfg, cutoff=0.85):
    """Messages, one per top-level key that looks like a misspelt runner key.

    Configs also define variables of their own at the top level (``data_root``,
    ``train_pipeline``, ``crop_size``...), so an unknown key is only an error when
    it is this close (difflib ratio >= ``cutoff``) to a key the runner reads:
    ``optim_wraper`` or ``default_hook`` would otherwise be ignored silently and the
    run go on with the defaults (or the base config's values).
    """
    import difflib
    problems = []
    for key in cfg.keys():
        if key in RUNNER_KEYS:
            continue
        close = difflib.get_close_matches(key, RUNNER_KEYS, n=1, cutoff=cutoff)
        if close:
            problems.append(f'unknown top-level config key {key!r}: the runner would ignore it. '
                            f'Did you mean {close[0]!r}?')
    return problems


def _registry_names():
    """Every name a config's ``type`` can take in scope densevit: densevit's registries,
    their mmengine parents and those parents' other children (mmcv's transforms), the
    position-embedding family's type names and TTA's ``nms`` (not registries)."""
    from mmengine.registry import Registry

    import densevit.registry as registries
    from densevit.models.layers.pos_embed_builder import POSITION_EMBEDDING_TYPES
    names = set(POSITION_EMBEDDING_TYPES) | {'nms'}  # nms: a TTA model's tta_cfg.nms.type
    for registry in vars(registries).values():
        if not isinstance(registry, Registry):
            continue
        registry.import_from_location()
        parent = registry.parent
        for reg in [registry, parent, *(parent.children.values() if parent else [])]:
            if reg is not None:
                names.update(reg.module_dict)
    return names


def unknown_types(cfg, cutoff=0.6):
    """Messages, one per ``type`` that no registry knows, with the closest known name.

    Found before anything is built: mmengine would raise a ``KeyError`` from deep inside
    the runner, after building the parts that come first."""
    import difflib
    names = _registry_names()
    problems = []
    for path, node in _walk(cfg._cfg_dict.to_dict() if hasattr(cfg, '_cfg_dict') else cfg):
        kind = node.get('type')
        if not isinstance(kind, str) or kind in names or kind.split('.')[-1] in names:
            continue
        close = difflib.get_close_matches(kind, names, n=1, cutoff=cutoff)
        hint = f" Did you mean {close[0]!r}?" if close else ''
        problems.append(f'unknown type {kind!r} (at {path}.type): no registry of densevit, '
                        f'mmengine or mmcv has it.{hint}')
    return problems
