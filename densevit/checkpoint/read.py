"""Reading checkpoints: the one place a file or URL becomes tensors, safely.

Every checkpoint densevit reads (``load_from``, ``--resume``, ``tools/test.py``,
``init_model``, ``init_cfg`` Pretrained, the converters) passes through
:func:`load_checkpoint_safely` (the object as saved) or :func:`read_checkpoint` (its
tensors as a flat dict): ``torch.load(weights_only=True)`` with the allow-list below,
or safetensors; a URL is downloaded to torch's hub cache first.

Allow-list for ``torch.load(weights_only=True)``.

mmengine 0.10 saves a few non-tensor objects in its checkpoints (its
``HistoryBuffer`` in the message hub, numpy arrays and scalars inside it) and
loads them with ``torch.load`` without ``weights_only``; torch >= 2.6 then
defaults to ``weights_only=True`` and refuses them. We allow exactly these
types, never ``weights_only=False``.

One more global is needed: a pickled ``HistoryBuffer`` carries its statistics
methods (``HistoryBuffer.min`` ...), which pickle protocol 2 (torch.save's)
writes as ``getattr(HistoryBuffer, 'min')``. ``builtins.getattr`` itself would
let a file reach any attribute of any allowed object, so the name is bound to
:func:`checkpoint_getattr`, which resolves only those few methods.
"""
import json
import os
import pickle
import re
import zipfile
from collections import OrderedDict
from urllib.parse import urlparse

import numpy as np
import torch

_HISTORY_BUFFER_METHODS = ('min', 'max', 'current', 'mean')


def _numpy_types():
    types = [np.ndarray, np.dtype]
    multiarray = getattr(np, '_core', np.core).multiarray
    types += [multiarray._reconstruct, multiarray.scalar]  # rebuild arrays / numpy scalars
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        types += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')]
    types += [np.float64, np.float32, np.int64, np.int32, np.bool_]
    return types


def checkpoint_safe_globals():
    """The non-tensor types found in mmengine checkpoints."""
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer] + _numpy_types()


def checkpoint_getattr(obj, name):
    """``getattr`` for the weights-only unpickler: only ``HistoryBuffer``'s statistics methods."""
    from mmengine.logging.history_buffer import HistoryBuffer
    if obj is HistoryBuffer and name in _HISTORY_BUFFER_METHODS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'checkpoint asks for getattr({obj!r}, {name!r}); densevit allows only '
        f'HistoryBuffer.{{{", ".join(_HISTORY_BUFFER_METHODS)}}}')


def allow_checkpoint_types():
    """Register :func:`checkpoint_safe_globals` with torch's weights-only unpickler."""
    torch.serialization.add_safe_globals(
        checkpoint_safe_globals() + [(checkpoint_getattr, 'builtins.getattr')])


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds pickled objects outside the allow-list (possibly code)."""


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that cannot be read: truncated (an interrupted save or copy) or
    not a checkpoint at all."""


def is_url(path):
    """True for an ``http://`` / ``https://`` checkpoint address."""
    return isinstance(path, str) and path.startswith(('http://', 'https://'))


def cached_url_path(url):
    """Where a URL's file lives in torch's hub cache: ``<hub dir>/checkpoints/<file name>``,
    the place ``torch.hub.load_state_dict_from_url`` uses, so one download serves both."""
    name = os.path.basename(urlparse(url).path)
    if not name:
        raise ValueError(f'checkpoint URL {url} names no file')
    return os.path.join(torch.hub.get_dir(), 'checkpoints', name)


class CheckpointDownloadError(OSError):
    """A checkpoint URL that could not be downloaded (offline, wrong address)."""


def download_checkpoint(url, progress=True):
    """The local path of ``url``'s file: the cached copy when there is one (offline use),
    else downloaded to torch's hub cache first. Only the bytes are fetched here; reading
    them is :func:`load_checkpoint_safely`'s job, so a URL is read as safely as a file."""
    path = cached_url_path(url)
    if os.path.isfile(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        torch.hub.download_url_to_file(url, path, progress=progress)
    except Exception as e:  # urllib's URLError / HTTPError, socket errors
        raise CheckpointDownloadError(
            f'could not download the checkpoint {url} ({type(e).__name__}: {e}); download it '
            f'yourself and give the local path, or put the file at {path}') from None
    return path


def load_checkpoint_safely(path, map_location='cpu', mmap=False):
    """``torch.load(path, weights_only=True)`` with errors that say what is wrong.

    ``path`` is a local file, a folder as Hugging Face's ``save_pretrained`` writes it
    (its ``model.safetensors`` or ``pytorch_model.bin``, or the shards its
    ``model.safetensors.index.json`` lists, merged), or an ``http(s)://`` URL; a URL's
    file is downloaded to torch's hub cache (or found there) and then read exactly as a
    local file.

    - a pickled object outside the allow-list (e.g. ``os.system`` through
      ``__reduce__``: a file that runs code when unpickled) raises
      :class:`UnsafeCheckpointError` naming the file and the global it asked for;
    - a truncated or corrupt file (an interrupted copy or save) raises
      :class:`CorruptCheckpointError` (a ``RuntimeError``) naming the file.
    Never falls back to ``weights_only=False``. ``mmap=True`` maps the tensors
    instead of reading them (a cheap check that a file is whole and safe).
    """
    if is_url(path):
        path = download_checkpoint(path)
    path = os.path.expanduser(os.fspath(path))
    if os.path.isdir(path):
        return _load_folder(path, map_location, mmap)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'checkpoint not found: {path}')
    if path.endswith('.safetensors'):  # tensors only by construction
        return _load_safetensors(path, map_location)
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        # name the global; torch's own advice (allow-list it) is not repeated
        found = re.search(r'GLOBAL ([\w.]+)', str(e))
        what = (f'the global {found[1]}' if found else
                (str(e).strip().splitlines() or ['an object'])[0][:200])
        raise UnsafeCheckpointError(
            f'{what}: refusing to load {path}, which asks to unpickle it. A checkpoint should '
            f'hold tensors only; unpickling other objects can run arbitrary code, so densevit '
            f'reads checkpoints with weights_only=True only. If the file comes from a source you '
            f'trust, re-save its tensors alone (its state_dict) in a trusted environment.'
        ) from None
    except (RuntimeError, EOFError) as e:
        if isinstance(e, EOFError) or not _whole_zip(path):
            raise CorruptCheckpointError(f'checkpoint {path} is truncated or corrupt (an interrupted '
                                         f'save or copy?): {e}') from None
        raise


HF_WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin')
HF_INDEX_FILE = 'model.safetensors.index.json'


def _load_folder(path, map_location, mmap):
    """A ``save_pretrained`` folder -> its tensors (one file, or the index's shards)."""
    for name in HF_WEIGHT_FILES:
        if os.path.isfile(os.path.join(path, name)):
            return load_checkpoint_safely(os.path.join(path, name), map_location, mmap)
    index = os.path.join(path, HF_INDEX_FILE)
    if os.path.isfile(index):
        with open(index) as f:
            shards = sorted(set(json.load(f).get('weight_map', {}).values()))
        merged = {}
        for shard in shards:
            merged.update(load_checkpoint_safely(os.path.join(path, shard), map_location, mmap))
        return merged
    raise FileNotFoundError(f'checkpoint folder {path} holds none of '
                            f'{", ".join(HF_WEIGHT_FILES + (HF_INDEX_FILE,))}: give the '
                            f'weights file itself')


def _whole_zip(path):
    """Whether ``path`` is a complete zip archive (torch.save's format) with intact members."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def _load_safetensors(path, map_location):
    """The tensors of a ``.safetensors`` file; ``{'state_dict', 'meta'}`` when a densevit
    converter recorded a meta in its metadata."""
    try:
        from safetensors import SafetensorError, safe_open
        from safetensors.torch import load_file
    except ImportError as e:
        raise ImportError(f'{path}: reading .safetensors needs `pip install safetensors`') from e
    try:
        tensors = load_file(path, device=str(map_location))
        with safe_open(path, 'pt') as f:
            recorded = (f.metadata() or {}).get('densevit_meta')
    except SafetensorError as e:
        raise CorruptCheckpointError(f'checkpoint {path} is truncated or corrupt: {e}') from None
    return {'state_dict': tensors, 'meta': json.loads(recorded)} if recorded else tensors


def use_safe_checkpoint_loader():
    """Make mmengine read every checkpoint through :func:`load_checkpoint_safely`.

    Local paths and ``http(s)://`` URLs (``load_from``, ``--resume``, mmengine's
    ``Pretrained`` init_cfg, ``tools/test.py CONFIG URL``) get densevit's loader as their
    scheme. mmengine's ``torchvision://`` / ``open-mmlab://`` / ``mmcls://`` schemes resolve
    a name to a URL and then call the module's ``load_from_http`` (which would unpickle with
    ``weights_only=False``): that name is rebound to the safe loader too.
    """
    import mmengine.runner.checkpoint as mm_checkpoint
    mm_checkpoint.CheckpointLoader.register_scheme(
        prefixes='', loader=mmengine_loader, force=True)
    mm_checkpoint.CheckpointLoader.register_scheme(
        prefixes=('http://', 'https://'), loader=mmengine_loader, force=True)
    mm_checkpoint.load_from_http = mmengine_loader


def mmengine_loader(filename, map_location=None, model_dir=None, progress=True):
    """:func:`load_checkpoint_safely` with the signature of mmengine's loaders (its
    ``load_from_http`` takes ``model_dir`` and ``progress``; the cache is torch's)."""
    return load_checkpoint_safely(filename, map_location or 'cpu')


# Dict keys under which training scripts nest the weights (mmengine, the
# official DETR / Swin / DeiT / MAE repos, DDP wrappers).
_NESTING_KEYS = ('state_dict', 'model', 'module', 'model_state', 'net')
_SHOW = 10


def read_checkpoint(path, map_location='cpu'):
    """The tensors of a checkpoint file or URL as a flat ``{name: tensor}`` dict
    (:func:`load_checkpoint_safely`, then :func:`flatten_checkpoint`)."""
    path = os.fspath(path)
    return flatten_checkpoint(load_checkpoint_safely(path, map_location=map_location), path)


def flatten_checkpoint(obj, path):
    """The ``{name: tensor}`` dict inside a loaded checkpoint object: nested ``{'model':
    ...}`` / ``{'state_dict': ...}`` wrappers and a DDP ``module.`` prefix removed."""
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


def checkpoint_meta(obj):
    """The ``meta`` dict of a loaded checkpoint object (mmengine's, or a converter's), or {}."""
    meta = obj.get('meta') if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}
