"""Matching a state dict against a module: what loads, what does not, and why.

:func:`load_matching` loads every tensor that fits into a module (each module's own
``_load_from_state_dict`` runs, so position tables and relative-bias tables made for
another grid or window are resized there) and returns a :class:`LoadReport`: the
tensors loaded, missing, unexpected, of the wrong shape (compared directly), and the
two signs of a file made for another architecture (too few of the module's tensors in
it; a nested layer whose tensors all have other names). The report does not decide:
the caller raises (:meth:`LoadReport.check`) or logs (:meth:`LoadReport.log`).

Origin options (LayerNorm eps, Swin's shift rule) never change the model: the config
wins, and :func:`option_changes` lists where the file's origin differs, for one line each.
"""
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from mmengine.logging import print_log

_SHOW = 10


class CheckpointMismatchError(ValueError):
    """A checkpoint that does not fit the model: another architecture, keys in a layout
    understood only in part, or (strict) tensors missing, unexpected or of the wrong shape."""


@dataclass
class LoadReport:
    """What :func:`load_matching` found; key lists are the module's names."""
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    mismatched: list = field(default_factory=list)  # (key, file shape, model shape)
    expected_missing: list = field(default_factory=list)
    found: int = 0  # the module's tensors present in the file
    total: int = 0  # the module's tensors
    structure: tuple | None = None  # (path, module, its missing names, the file's names there)
    foreign: bool = False  # too few of the module's tensors: nothing was loaded

    @property
    def complete(self):
        return not (self.missing or self.unexpected or self.mismatched)

    def check(self, module, source, what, strict=False):
        """Raise :class:`CheckpointMismatchError` for a file of another architecture and,
        with ``strict``, for anything missing, unexpected or of the wrong shape."""
        built = describe_module(module)
        if self.foreign:
            raise CheckpointMismatchError(
                f'{source} does not fit this model: it is {what}, but the config builds '
                f'{built}; only {self.found} of its {self.total} tensors are in the file. Use a '
                f"config for the checkpoint's architecture.")
        if self.structure is not None:
            path, child, want, have = self.structure
            raise CheckpointMismatchError(
                f'{source} does not fit this model: it is {what}, but the config builds '
                f'{built}, whose {path} is a {type(child).__name__} with tensors {want}; the '
                f"file has {have} there instead. Use a config for the checkpoint's architecture.")
        if strict and not self.complete:
            raise CheckpointMismatchError(
                f'{type(module).__name__}: {source} does not match the model: '
                f'{len(self.missing)} missing {self.missing[:_SHOW]}, {len(self.unexpected)} '
                f'unexpected {self.unexpected[:_SHOW]}, {len(self.mismatched)} of the wrong '
                f'shape {self._shapes()[:_SHOW]}; the file is {what}, the config builds {built}')

    def _shapes(self):
        return [f'{k} {tuple(have)} in the file, {tuple(want)} in the model'
                for k, have, want in self.mismatched]

    def log(self, module, source, origin=None, logger='current'):
        """One line of counts, then a WARNING line per kind of mismatch."""
        name = type(module).__name__
        bad = not self.complete
        print_log(f'{name}: loaded {len(self.loaded)}/{self.total} tensors from {source}'
                  + (f' ({origin} layout, converted)' if origin else '')
                  + (' -- SOME WEIGHTS DID NOT LOAD, see below' if bad else ''),
                  logger=logger, level=logging.WARNING if bad else logging.INFO)
        _listed(f'{name}: MISSING in the checkpoint, left at random init', self.missing, logger)
        _listed(f'{name}: UNEXPECTED in the checkpoint, ignored', self.unexpected, logger)
        _listed(f'{name}: WRONG SHAPE in the checkpoint, left at random init', self._shapes(),
                logger)
        _listed(f'{name}: not in this kind of checkpoint (expected), newly initialised',
                self.expected_missing, logger, level=logging.INFO)


def _listed(what, keys, logger, level=logging.WARNING):
    if keys:
        shown = ', '.join(keys[:_SHOW]) + (', ...' if len(keys) > _SHOW else '')
        print_log(f'{what} ({len(keys)}): {shown}', logger=logger, level=level)


def describe_module(module):
    """e.g. ``EncoderDecoder(MixVisionTransformer, SegformerHead)`` or ``SwinTransformer``."""
    parts = [type(getattr(module, n)).__name__ for n in ('backbone', 'neck', 'decode_head',
                                                          'bbox_head', 'mask_head')
             if isinstance(getattr(module, n, None), torch.nn.Module)]
    return f'{type(module).__name__}({", ".join(parts)})' if parts else type(module).__name__


def load_matching(module, state_dict, expected_missing=(), min_found=0.0):
    """Load what fits of ``state_dict`` into ``module``; a :class:`LoadReport` of the rest.

    Args:
        expected_missing (Iterable[str]): key prefixes this kind of checkpoint never
            has (e.g. Swin's extra output norms): listed apart, not as missing.
        min_found (float): fewer than this fraction of the module's tensors in the file
            marks it ``foreign`` (another architecture) and nothing is loaded.
    """
    own = module.state_dict()
    report = LoadReport(total=len(own), found=sum(k in state_dict for k in own))
    if own and report.found < min_found * len(own):
        report.foreign = True
        return report
    given = OrderedDict(state_dict)  # the modules' load hooks may resize entries in place
    missing, unexpected, errors = [], [], []

    def load(m, prefix=''):
        m._load_from_state_dict(given, prefix, {}, True, missing, unexpected, errors)
        for name, child in m._modules.items():
            if child is not None:
                load(child, prefix + name + '.')

    load(module)
    mismatched = [(k, given[k].shape, own[k].shape) for k in own
                  if k in given and torch.is_tensor(given[k]) and given[k].shape != own[k].shape]
    if len(errors) > len(mismatched):  # something other than a shape went wrong
        raise RuntimeError('loading the checkpoint failed:\n' + '\n'.join(errors))
    wrong = {k for k, _, _ in mismatched}
    report.expected_missing = [k for k in missing if k.startswith(tuple(expected_missing))]
    report.missing = [k for k in missing if k not in report.expected_missing]
    report.unexpected, report.mismatched = unexpected, mismatched
    report.loaded = [k for k in own if k not in set(missing) | wrong]
    report.structure = _structure_mismatch(module, own, report.missing, unexpected)
    return report


def _structure_mismatch(module, own, missing, unexpected):
    """Where the file's module tree differs from the model's inside a part, or None.

    A nested module (below a top-level part such as ``decode_head``) none of whose
    tensors are in the file, while the file has other tensors under its name (e.g.
    the model's ``decode_head.linear_projs.0`` is a ``Conv2d`` with ``weight``,
    ``bias`` and the file holds ``conv.weight``, ``bn.*`` there), was built as
    another kind of layer. A whole part of another type (a different head) and
    single renamed tensors are not reported here.
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


def option_changes(module, options):
    """``[(name, the file's value, the model's value)]`` for each origin option of the
    checkpoint (``Layout.options``, or the ``options`` a converter recorded in the file's
    meta) that differs from what the backbone was built with. The model is not changed."""
    backbone = getattr(module, 'backbone', module)
    changes = []
    for name, value in (options or {}).items():
        current = getattr(backbone, name, None)
        if current is not None and current != value:
            changes.append((name, value, current))
    return changes


def log_option_changes(module, options, source, origin, logger='current'):
    """One WARNING line per :func:`option_changes` entry, naming both values."""
    for name, value, current in option_changes(module, options):
        print_log(f'{source}: its origin ({origin or "unknown"}) was built with {name}={value}; '
                  f'this model keeps {name}={current} from its config, so its outputs may differ '
                  f"slightly from the original's (set the backbone's {name}={value!r} in the "
                  f'config to match)', logger=logger, level=logging.WARNING)


def load_into(module, state_dict, source, origin=None, options=None, described=None,
              expected_missing=(), strict=False, min_found=0.0, check=None, logger='current'):
    """Match ``state_dict`` (already in densevit's layout) against ``module``, load what
    fits, then raise (another architecture; ``strict`` and anything off) or log the report.

    Args:
        source (str): the file, for messages.
        origin (str, optional): the layout it was converted from (e.g. 'MMSegmentation SETR').
        options (dict, optional): the origin's backbone options (:func:`option_changes`).
        described (str, optional): what the file says it is (e.g. from its ``meta``).
        check (callable, optional): ``check(module, state_dict, source, what)`` before
            loading; raises :class:`CheckpointMismatchError` for a file that cannot fit.

    Returns:
        LoadReport.
    """
    what = ' '.join(filter(None, [f'a {origin} checkpoint' if origin else 'a checkpoint',
                                  described and f'({described})']))
    if check is not None:
        check(module, state_dict, source, what)
    report = load_matching(module, state_dict, expected_missing, min_found)
    report.check(module, source, what, strict)
    log_option_changes(module, options, source, origin, logger)
    report.log(module, source, origin, logger)
    return report
