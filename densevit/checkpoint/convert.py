"""Recognising a checkpoint's key layout and converting it to densevit's.

- :func:`convert_model`: a whole model (a detector or a segmentor with its heads), from
  whichever family's whole-model layouts (:data:`FAMILIES`) explain its keys;
- :func:`convert_any`: a whole model or, failing that, a backbone (what
  ``tools/convert/checkpoint.py`` writes);
- :func:`origin_and_options`: where a checkpoint came from and the backbone options of
  that origin (LayerNorm eps, Swin's shift rule): from the conversion, or from the
  ``meta`` a converter recorded in the file (:func:`converted_meta`).

A family module (e.g. :mod:`densevit.checkpoint.detr`) takes part by defining
``model_layouts(state_dict) -> list[Layout]``: its whole-model layouts, which may
depend on the keys (e.g. box refinement present or not). Keys that are not model
weights (an EMA copy, data preprocessor buffers) are skipped with a logged count.
"""
import importlib
import logging
import re
from collections import OrderedDict

from mmengine.logging import print_log

from .layout import PartialLayoutError, UnknownLayoutError, convert_state_dict
from .vit import DENSEVIT_MODEL, densevit_model_layout

# modules of this package with model_layouts(state_dict)
FAMILIES = ('detr', 'detr_panoptic', 'deformable_detr', 'co_dino', 'conditional_detr', 'dab_detr',
            'mit', 'setr', 'upernet', 'eomt', 'mask2former')

# keys in saved models that are not weights of the model itself
_NOT_WEIGHTS = r'(data_preprocessor\.|ema_|ema_model\.|module\.ema\.).*'
_SHOW = 5


def model_layouts(state_dict):
    """Every family's whole-model layouts for these keys."""
    layouts = []
    for name in FAMILIES:
        module = importlib.import_module(f'{__package__}.{name}')
        layouts += module.model_layouts(state_dict)
    return layouts


def drop_non_weights(state_dict, source='checkpoint', logger='current'):
    """``state_dict`` without EMA copies / data-preprocessor buffers (logged with a count)."""
    skipped = {k for k in state_dict if re.fullmatch(_NOT_WEIGHTS, k)}
    if not skipped:
        return state_dict
    print_log(f'{source}: skipped {len(skipped)} key(s) that are not model weights (EMA copy, '
              f'data preprocessor): {sorted(skipped)[:_SHOW]}{"..." if len(skipped) > _SHOW else ""}',
              logger=logger)
    return OrderedDict((k, v) for k, v in state_dict.items() if k not in skipped)


def convert_model(state_dict, strict=True, logger='current'):
    """Convert a whole-model checkpoint from whichever known layout explains its keys.

    Returns:
        Converted: densevit's keys, with the origin's ``layout`` name and backbone
        ``options``.

    Raises:
        UnknownLayoutError: no layout fits.
        PartialLayoutError: (``strict``) the best one leaves keys unexplained; the
            message names the layout, how many keys it understood and the first it did not.
    """
    state_dict = drop_non_weights(state_dict, logger=logger)
    return convert_state_dict(state_dict, model_layouts(state_dict), 'whole-model checkpoint',
                              strict, logger=logger)


# backbone-only converters, tried when no whole-model layout fits
_BACKBONES = (('vit', 'convert_vit'), ('swin', 'convert_swin'), ('mit', 'convert_mit'))


def convert_any(state_dict, strict=True, logger='current'):
    """A whole model (:func:`convert_model`) or, when no whole-model layout fits, a backbone.
    A backbone also wins where a whole-model layout explains the keys in part and a backbone
    layout explains them all.

    Raises:
        UnknownLayoutError: neither (the message lists the first keys and, for keys
            under ``backbone.``, says that a backbone is converted from them too).
        ValueError: a densevit detector / segmentor, which needs no conversion.
    """
    try:
        return convert_model(state_dict, strict=True, logger=logger)
    except UnknownLayoutError:
        pass
    except PartialLayoutError:
        # keys named in part as a whole model's (HF DETR's encoder layers are named as CLIP's
        # image tower's): a backbone layout that explains every key is the file's; else the
        # whole model's, partly (strict: the error)
        backbone = _explained_backbone(state_dict)
        if backbone is not None:
            return backbone
        if strict:
            raise
        return convert_model(state_dict, strict=False, logger=logger)
    if densevit_model_layout(state_dict) is DENSEVIT_MODEL:
        raise ValueError('the keys are a densevit detector / segmentor\'s own: it needs no '
                         'conversion (tools/test.py, init_model and load_from take it as it is; '
                         'a ViT\'s init_cfg takes its backbone). First keys: '
                         f'{list(state_dict)[:_SHOW]}')
    converted = _convert_backbone(state_dict, strict)
    if converted is None and any(k.startswith('backbone.') for k in state_dict):
        # a classifier (mmpretrain) or a segmentor with its heads removed: the backbone alone
        inner = OrderedDict((k[len('backbone.'):], v) for k, v in state_dict.items()
                            if k.startswith('backbone.'))
        converted = _convert_backbone(inner, strict)
        if converted is not None:
            others = [k for k in state_dict if not k.startswith('backbone.')]
            print_log(f'converted the backbone under \'backbone.\' ({len(inner)} keys)'
                      + (f'; {len(others)} other key(s) dropped: {others[:_SHOW]}' if others
                         else ''), logger=logger)
    if converted is not None:
        return converted
    raise UnknownLayoutError(f'the keys match no known whole-model or backbone layout; first '
                             f'keys: {list(state_dict)[:_SHOW]}')


def _explained_backbone(state_dict):
    """A backbone conversion of every key of ``state_dict``, or None."""
    try:
        return _convert_backbone(state_dict, strict=True)
    except ValueError:  # a backbone layout that explains the keys in part only
        return None


def _convert_backbone(state_dict, strict):
    """The first backbone converter that recognises ``state_dict``, or None."""
    for module_name, fn in _BACKBONES:
        convert = getattr(importlib.import_module(f'{__package__}.{module_name}'), fn)
        try:
            return convert(state_dict, strict=strict)
        except UnknownLayoutError:
            continue
    return None


# backbone attributes that origin options set (see densevit.checkpoint.match.option_changes)
OPTION_NAMES = ('layer_norm_eps', 'always_shift')


def converted_meta(converted):
    """The ``meta`` a converter writes beside the tensors: the origin's layout name and
    backbone options, so the converted file loads into the same model as its origin."""
    return dict(densevit_origin=getattr(converted, 'layout', None),
                densevit_options=dict(getattr(converted, 'options', {}) or {}))


def origin_and_options(module, state_dict, meta, source, logger='current'):
    """(origin name or None, its backbone options) of a checkpoint about to be loaded.

    From the conversion just made (a :class:`~densevit.checkpoint.layout.Converted`), else
    from what a converter recorded in the file's ``meta``. A file in densevit's layout
    with no ``meta`` at all (a bare state dict, e.g. converted before converters recorded
    the options) gets a warning when the backbone has such options: they are unknown,
    and the config's are used.
    """
    layout, options = getattr(state_dict, 'layout', None), getattr(state_dict, 'options', None)
    if options or (layout and not layout.startswith('densevit')):
        return layout, dict(options or {})
    if 'densevit_options' in meta:
        return meta.get('densevit_origin'), dict(meta['densevit_options'] or {})
    backbone = getattr(module, 'backbone', module)
    kept = {n: getattr(backbone, n) for n in OPTION_NAMES if hasattr(backbone, n)}
    if not meta and kept:
        print_log(f'{source} records no origin options (a bare state dict, or a file converted '
                  f'before densevit recorded them): if it was converted from another library, '
                  f'its options are unknown; the config\'s are used ({kept})', logger=logger,
                  level=logging.WARNING)
    return None, {}
