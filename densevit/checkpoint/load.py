"""Loading pretrained weights into a backbone: safely, converted, and loudly.

mmengine's ``init_cfg=dict(type='Pretrained', ...)`` loads with ``strict=False``
and reports missing or unexpected keys in a log line that is easy to miss; a
checkpoint in another key layout then leaves the backbone at its random
initialisation without anyone noticing. Here a backbone's ``init_weights`` is
wrapped by :func:`loads_pretrained`, which

- reads the file with ``torch.load(weights_only=True)`` (or safetensors),
- converts its key layout (timm / HF / official repos) to densevit's,
- loads what matches and logs WARNING lines with counts and the first keys of
  everything missing, unexpected or of the wrong shape.

Usage in a backbone::

    @loads_pretrained(convert_swin)
    def init_weights(self):
        ...  # the random initialisation, as before
"""
import functools
import logging
import os
from collections import OrderedDict, namedtuple

import torch
from mmengine.logging import print_log

from .safe_load import load_checkpoint_safely

# Dict keys under which training scripts nest the weights (mmengine, the
# official DETR / Swin / DeiT / MAE repos, DDP wrappers).
_NESTING_KEYS = ('state_dict', 'model', 'module', 'model_state', 'net')
_SHOW = 10  # keys listed per report line

class CheckpointMismatchError(ValueError):
    """A checkpoint that does not fit the model: another architecture, keys in a layout
    understood only in part, or (strict) tensors missing, unexpected or of the wrong shape."""


LoadReport = namedtuple('LoadReport', 'loaded missing unexpected mismatched expected_missing')


def read_checkpoint(path, map_location='cpu'):
    """The tensors of a checkpoint file or URL as a flat ``{name: tensor}`` dict.

    ``.safetensors`` files are read with safetensors; anything else with
    ``torch.load(weights_only=True)`` (plus densevit's allow-list), never by
    unpickling arbitrary objects. Nested ``{'model': ...}`` / ``{'state_dict':
    ...}`` wrappers and a DDP ``module.`` prefix are removed.
    """
    path = os.fspath(path)
    # the same reader and errors as load_from / resume (missing, truncated, unsafe;
    # safetensors); a URL is downloaded to torch's hub cache first, then read as a file
    obj = load_checkpoint_safely(path, map_location=map_location)
    return flatten_checkpoint(obj, path)


def flatten_checkpoint(obj, path):
    """The ``{name: tensor}`` dict inside a loaded checkpoint object (see :func:`read_checkpoint`)."""
    while isinstance(obj, dict) and not any(torch.is_tensor(v) for v in obj.values()):
        inner = next((obj[k] for k in _NESTING_KEYS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            raise ValueError(f'{path}: no weights found; top-level keys: {list(obj)[:_SHOW]}')
        obj = inner
    if not isinstance(obj, dict):
        raise ValueError(f'{path}: expected a dict of tensors, got {type(obj).__name__}')
    tensors = OrderedDict((k, v) for k, v in obj.items() if torch.is_tensor(v))
    if tensors and all(k.startswith('module.') for k in tensors):
        tensors = OrderedDict((k[len('module.'):], v) for k, v in tensors.items())
    return tensors


def select_prefix(state_dict, prefix):
    """Keys under ``prefix`` (e.g. 'backbone.') with the prefix removed."""
    if not prefix:
        return state_dict
    out = OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))
    if not out:
        raise ValueError(f'no checkpoint key starts with {prefix!r}; first keys: '
                         f'{list(state_dict)[:_SHOW]}')
    return out


def _load_collecting(module, state_dict):
    """``load_state_dict`` that collects every problem instead of raising on the first.

    Each module's own ``_load_from_state_dict`` runs (so tables are resized and
    legacy names renamed there); a tensor of the wrong shape is reported and
    skipped, not fatal.
    """
    state_dict = OrderedDict(state_dict)
    missing, unexpected, errors = [], [], []

    def load(m, prefix=''):
        m._load_from_state_dict(state_dict, prefix, {}, True, missing, unexpected, errors)
        for name, child in m._modules.items():
            if child is not None:
                load(child, prefix + name + '.')

    load(module)
    mismatched = [msg.split('size mismatch for ')[-1].split(':')[0]
                  for msg in errors if 'size mismatch' in msg]
    other = [msg for msg in errors if 'size mismatch' not in msg]
    if other:
        raise RuntimeError('loading pretrained weights failed:\n' + '\n'.join(other))
    return missing, unexpected, mismatched, errors


def _warn(what, keys, logger, level=logging.WARNING):
    if keys:
        shown = ', '.join(keys[:_SHOW]) + (', ...' if len(keys) > _SHOW else '')
        print_log(f'{what} ({len(keys)}): {shown}', logger=logger, level=level)


def load_pretrained(module, checkpoint, convert=None, prefix=None, expected_missing=(),
                    map_location='cpu', strict=False, check=None, logger='current'):
    """Load a checkpoint into ``module``, converting its layout, and report loudly.

    Args:
        module (nn.Module): the backbone.
        checkpoint (str): file path or URL (``.pth``, ``.safetensors``).
        convert (callable, optional): ``state_dict -> state_dict`` in densevit's
            layout, e.g. :func:`densevit.checkpoint.swin.convert_swin`.
        prefix (str, optional): take only keys under this prefix (e.g.
            'backbone.' from a whole detector), prefix removed.
        expected_missing (Iterable[str]): key prefixes that this checkpoint kind
            is known not to have (e.g. Swin's extra output norms): reported at
            INFO level, not WARNING.
        strict (bool): raise instead of warning when anything does not match.
        check (callable, optional): ``check(module, state_dict, source, what)`` on the
            converted tensors before loading; raises
            :class:`CheckpointMismatchError` for a checkpoint that cannot fit (e.g.
            :func:`densevit.checkpoint.vit.check_vit_size`: another width or depth).

    Returns:
        LoadReport: key lists ``loaded, missing, unexpected, mismatched, expected_missing``.
    """
    state_dict = select_prefix(read_checkpoint(checkpoint, map_location), prefix)
    return load_state_dict_loudly(module, state_dict, checkpoint, convert=convert,
                                  expected_missing=expected_missing, strict=strict,
                                  check=check, logger=logger)


def _describe(module):
    """e.g. ``EncoderDecoder(MixVisionTransformer, SegformerHead)`` or ``SwinTransformer``."""
    parts = [type(getattr(module, n)).__name__ for n in ('backbone', 'neck', 'decode_head',
                                                          'bbox_head')
             if isinstance(getattr(module, n, None), torch.nn.Module)]
    return f'{type(module).__name__}({", ".join(parts)})' if parts else type(module).__name__


def load_state_dict_loudly(module, state_dict, source, convert=None, expected_missing=(),
                           strict=False, min_found=0.0, described=None, check=None,
                           logger='current'):
    """Convert ``state_dict`` and load it into ``module``, reporting every mismatch.

    Args:
        module (nn.Module): a backbone or a whole model.
        state_dict (dict): ``{name: tensor}`` as read from ``source``.
        source (str): the file, for messages.
        convert (callable, optional): ``state_dict -> state_dict`` in densevit's
            layout; a :class:`~densevit.checkpoint.layout.Converted` result also
            carries the origin's backbone options (``checkpoint_options``).
        expected_missing, strict, check, logger: as :func:`load_pretrained`.
        min_found (float): the fraction of ``module``'s tensors the checkpoint must
            have; fewer means it was made for another architecture.
        described (str, optional): what the checkpoint is, for messages, when
            ``convert`` does not say (e.g. read from its ``meta``).

    Raises:
        CheckpointMismatchError: the checkpoint is for another architecture (fewer than
            ``min_found`` of ``module``'s tensors are in it; the message names both), or
            ``strict`` and anything missing, unexpected or of the wrong shape.
    """
    name = type(module).__name__
    if convert is not None:
        state_dict = convert(state_dict)
    origin = getattr(state_dict, 'layout', None)
    what = ' '.join(filter(None, [f'a {origin} checkpoint' if origin else 'a checkpoint',
                                  described and f'({described})']))
    if check is not None:
        check(module, state_dict, source, what)
    own = module.state_dict()
    found = sum(k in state_dict for k in own)
    if own and found < min_found * len(own):
        raise CheckpointMismatchError(
            f'{source} does not fit this model: it is {what} with {len(state_dict)} '
            f'tensors (first {list(state_dict)[:3]}), but the config builds {_describe(module)}; '
            f'only {found} of its {len(own)} tensors are in the file. Use a config for the '
            f"checkpoint's architecture.")
    options = getattr(state_dict, 'options', None)
    if options:
        _apply_options(module, options, origin, logger)
    missing, unexpected, mismatched, errors = _load_collecting(module, state_dict)
    where = _structure_mismatch(module, own, missing, unexpected)
    if where is not None:
        path, child, want, have = where
        raise CheckpointMismatchError(
            f'{source} does not fit this model: it is {what}, but the config builds '
            f'{_describe(module)}, whose {path} is a {type(child).__name__} with tensors {want}; '
            f'the file has {have} there instead. Use a config for the checkpoint\'s '
            f'architecture.')
    expected = [k for k in missing if k.startswith(tuple(expected_missing))]
    missing = [k for k in missing if k not in expected]
    loaded = [k for k in own if k not in missing + expected + mismatched]

    if strict and (missing or unexpected or mismatched):
        raise CheckpointMismatchError(
            f'{name}: {source} does not match the model: {len(missing)} missing '
            f'{missing[:_SHOW]}, {len(unexpected)} unexpected {unexpected[:_SHOW]}, '
            f'{len(mismatched)} of the wrong shape {errors[:_SHOW]}; the file is {what}, the '
            f'config builds {_describe(module)}')
    total = len(own)
    bad = missing or unexpected or mismatched
    print_log(f'{name}: loaded {len(loaded)}/{total} tensors from {source}'
              + (f' ({origin} layout, converted)' if origin else '')
              + (' -- SOME WEIGHTS DID NOT LOAD, see below' if bad else ''),
              logger=logger, level=logging.WARNING if bad else logging.INFO)
    _warn(f'{name}: MISSING in the checkpoint, left at random init', missing, logger)
    _warn(f'{name}: UNEXPECTED in the checkpoint, ignored', unexpected, logger)
    _warn(f'{name}: WRONG SHAPE in the checkpoint, left at random init',
          [m.split('size mismatch for ')[-1] for m in errors if 'size mismatch' in m], logger)
    _warn(f'{name}: not in this kind of checkpoint (expected), newly initialised',
          expected, logger, level=logging.INFO)
    return LoadReport(loaded, missing, unexpected, mismatched, expected)


def _structure_mismatch(module, own, missing, unexpected):
    """Where the file's module tree differs from the model's inside a part, or None.

    A nested module (below a top-level part such as ``decode_head``) none of whose
    tensors are in the file, while the file has other tensors under its name (e.g.
    the model's ``decode_head.linear_projs.0`` is a ``Conv2d`` with ``weight``,
    ``bias`` and the file holds ``conv.weight``, ``bn.*`` there), was built as
    another kind of layer. A whole part of another type (a different head) and
    single renamed tensors are not reported here.

    Returns:
        ``(path, module, [its missing names], [the file's names there])`` or None.
    """
    if not missing or not unexpected:
        return None
    modules = dict(module.named_modules())
    for key in unexpected:
        parts = key.split('.')
        path = next((p for p in ('.'.join(parts[:i]) for i in range(len(parts) - 1, 1, -1))
                     if p in modules), None)
        if path is None:
            continue
        want = [k[len(path) + 1:] for k in missing if k.startswith(path + '.')]
        # loaded from the file (BatchNorm fills a missing num_batches_tracked itself)
        loaded = [k for k in own if k.startswith(path + '.') and k not in missing
                  and not k.endswith('.num_batches_tracked')]
        if want and not loaded:
            have = [k[len(path) + 1:] for k in unexpected if k.startswith(path + '.')]
            return path, modules[path], want[:_SHOW], have[:_SHOW]
    return None


def _apply_options(module, options, origin, logger):
    """Hand the origin's backbone options (e.g. LayerNorm eps) to the backbone."""
    backbone = getattr(module, 'backbone', module)
    apply = getattr(backbone, 'checkpoint_options', None)
    if apply is None:
        print_log(f'{type(backbone).__name__} takes no checkpoint options; {origin} checkpoints '
                  f'were made with {options}: outputs may differ slightly',
                  logger=logger, level=logging.WARNING)
        return
    apply(**options)


def split_pretrained(init_cfg):
    """(the ``type='Pretrained'`` entry of ``init_cfg`` or None, the other entries or None)."""
    cfgs = [init_cfg] if isinstance(init_cfg, dict) else list(init_cfg or [])
    pretrained = [c for c in cfgs if c.get('type') == 'Pretrained']
    rest = [c for c in cfgs if c.get('type') != 'Pretrained']
    if len(pretrained) > 1:
        raise ValueError(f'init_cfg has {len(pretrained)} Pretrained entries; give one')
    return (pretrained[0] if pretrained else None), (rest or None)


def loads_pretrained(convert=None, expected_missing=(), check=None):
    """Decorate a backbone's ``init_weights``: ``init_cfg`` Pretrained goes through
    :func:`load_pretrained`.

    The wrapped ``init_weights`` runs first with the Pretrained entry hidden from
    ``init_cfg`` (so mmengine does not load it a second time, silently); then the
    checkpoint is converted with ``convert`` and loaded on top, with the report.

    Args:
        convert (callable, optional): the backbone's layout converter.
        expected_missing (Iterable[str] | callable): key prefixes a pretrained
            (e.g. ImageNet) checkpoint never has; a callable gets the module.
        check (callable, optional): refuses a checkpoint that cannot fit (see
            :func:`load_pretrained`).
    """
    def wrap(init_weights):
        @functools.wraps(init_weights)
        def wrapper(self):
            pretrained, rest = split_pretrained(self.init_cfg)
            if pretrained is None or self._is_init:
                return init_weights(self)
            original, self.init_cfg = self.init_cfg, rest
            try:
                init_weights(self)
            finally:
                self.init_cfg = original
            known = expected_missing(self) if callable(expected_missing) else expected_missing
            load_pretrained(self, pretrained['checkpoint'], convert=convert,
                            prefix=pretrained.get('prefix'), expected_missing=known,
                            map_location=pretrained.get('map_location', 'cpu'), check=check)
            if hasattr(self, '_params_init_info'):  # mmengine's init summary
                from mmengine.model.weight_init import update_init_info
                update_init_info(self, init_info=f'Pretrained: {pretrained["checkpoint"]}')
        return wrapper
    return wrap
