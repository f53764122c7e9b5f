"""What ``tools/train.py`` and ``tools/test.py`` share: reading the config and its
``--cfg-options``, the checks before anything is built, and one line per error.

Bad input stops before any time is spent, with one line naming the file, key or value:

- the config or a ``_base_`` file missing, or not valid Python: :class:`ConfigError`;
- ``--cfg-options``: the same key twice (refused by the argument parser), a value of
  the wrong kind for its key (``train_cfg.max_iters=abc``), or a key the config does
  not have whose name is close to one it has (``train_cfg.max_iter``: "did you mean");
- the preflight (:func:`config_problems`): misspelt top-level keys, ``type`` names no
  registry knows, missing files, a work dir that cannot be written.
"""
import difflib
import os
import os.path as osp
import sys

from mmengine.config import Config, DictAction

from densevit.checkpoint.model import CHECKPOINT_ERRORS
from densevit.checkpoint.read import CheckpointDownloadError
from densevit.datasets.transforms.loading import (
    IMAGE_ERRORS,
    UNREADABLE_HINT,
    DataError,
    image_error_line,
)
from densevit.engine.checkpoint_hook import CheckpointSaveError
from densevit.engine.dist_faults import PeerFailureError
from densevit.engine.preflight import missing_inputs, misspelt_keys, unknown_types
from densevit.engine.work_dir_lock import WorkDirInUseError
from densevit.models.data_preprocessors.token_limit import ImageTooLargeError


class ConfigError(ValueError):
    """A config that cannot be read, or ``--cfg-options`` that do not fit it."""


class CfgOptions(DictAction):
    """mmengine's ``--cfg-options`` action, refusing a key given twice (the last would win
    without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = {}
        for item in values:
            key, _, value = item.partition('=')
            if key in seen:
                parser.error(f'{option_string} gives {key} twice ({key}={seen[key]} and '
                             f'{key}={value}); give it once')
            seen[key] = value
        super().__call__(parser, namespace, values, option_string)


def _option_problem(cfg, key, value):
    """What is wrong with ``--cfg-options key=value`` for ``cfg``, or None."""
    node, parts = cfg, key.split('.')
    for depth, part in enumerate(parts):
        where = '.'.join(parts[:depth]) or 'the config'
        if isinstance(node, (list, tuple)) and part.isdigit():
            if int(part) >= len(node):
                return f'{where} has {len(node)} entries, so no [{part}]'
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            return None  # replaces a value by a dict: mmengine's own rule applies
        if part not in node:
            close = difflib.get_close_matches(part, [str(k) for k in node], n=1, cutoff=0.8)
            if close:
                return (f'{where} has no key {part!r}: did you mean {close[0]!r}? (a new key '
                        f'this close to an existing one is taken for a typo)')
            return None  # a new key: allowed
        node = node[part]
    if isinstance(node, bool) and not isinstance(value, bool):
        return f'expects True or False (the config has {node}), got {value!r}'
    if isinstance(node, (int, float)) and not isinstance(node, bool) and isinstance(value, str):
        kind = 'an integer' if isinstance(node, int) else 'a number'
        return f'expects {kind} (the config has {node}), got {value!r}'
    return None


def load_config(path, cfg_options=None):
    """The config at ``path`` with ``cfg_options`` merged; :class:`ConfigError` (one line,
    to be printed after the config's path) for a missing or broken file and for options
    that do not fit."""
    try:
        cfg = Config.fromfile(path)
    except FileNotFoundError as e:
        missing = e.filename or str(e)
        what = 'not found' if osp.abspath(missing) == osp.abspath(path) else \
            f'names a file that is not found (in _base_ or read_base): {missing}'
        raise ConfigError(f'config {what}') from None
    except SyntaxError as e:
        raise ConfigError(f'not valid Python (line {e.lineno}): '
                          f'{e.msg}') from None
    problems = [f'--cfg-options {k}={v!r}: {p}' for k, v in (cfg_options or {}).items()
                if (p := _option_problem(cfg._cfg_dict.to_dict(), k, v))]
    if problems:
        raise ConfigError('; '.join(problems))
    cfg.merge_from_dict(cfg_options or {})
    return cfg


def work_dir_problem(work_dir):
    """A line saying why ``work_dir`` cannot hold the run's files, or None (nothing is
    created: the nearest existing folder on its path must be a writable directory)."""
    existing = osp.abspath(work_dir)
    while not osp.exists(existing):
        existing = osp.dirname(existing)
    if not osp.isdir(existing):
        why = f'{existing} is a file, not a folder'
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f'{existing} is not writable'
    else:
        return None
    return f'cannot use the work dir {work_dir}: {why}; give a writable --work-dir'


def config_problems(cfg, resume=False, loaders=None, pretrained=True):
    """Every problem found before building: misspelt keys, unknown types, missing files,
    an unwritable work dir (one line each)."""
    kwargs = dict(resume=resume, pretrained=pretrained)
    if loaders:
        kwargs['loaders'] = loaders
    problems = misspelt_keys(cfg) + unknown_types(cfg) + missing_inputs(cfg, **kwargs)
    problem = work_dir_problem(cfg.work_dir)
    return problems + ([problem] if problem else [])


def report(lines):
    """Print each line as ``densevit: LINE`` on stderr; returns the exit status 1."""
    for line in lines:
        print(f'densevit: {line}', file=sys.stderr)
    return 1


# errors the tools print as one line, whatever part of the run raised them
ONE_LINE_ERRORS = (*CHECKPOINT_ERRORS, CheckpointSaveError, CheckpointDownloadError,
                   PeerFailureError, WorkDirInUseError, ConfigError, ImageTooLargeError)


def one_line(error):
    """The line a tool prints for an error of :data:`ONE_LINE_ERRORS` or ``IMAGE_ERRORS``."""
    if isinstance(error, IMAGE_ERRORS) and not isinstance(error, ONE_LINE_ERRORS):
        return f'{image_error_line(error)}. {UNREADABLE_HINT}'
    if isinstance(error, DataError):  # a DataLoader worker's copy carries its traceback
        return image_error_line(error)
    return str(error)
