"""Whole-model checkpoints (a detector or a segmentor with its heads), from any known origin.

:func:`load_model_weights` is what ``tools/test.py``, ``load_from`` and
:func:`densevit.apis.init_model` use: a checkpoint already in densevit's layout
loads as it is; any other is recognised by its keys among the whole-model layouts
of the family modules (:data:`FAMILIES`), converted, and loaded with a report
(or, ``strict``, an error listing what does not match). Keys that are not model
weights (an EMA copy, data preprocessor buffers) are skipped with a logged count.

A family module (e.g. :mod:`densevit.checkpoint.detr`) takes part by defining
``model_layouts(state_dict) -> list[Layout]``: its whole-model layouts, which may
depend on the keys (e.g. box refinement present or not).
"""
import importlib
import re
from collections import OrderedDict

from mmengine.logging import print_log

from .layout import convert_state_dict
from .load import CheckpointMismatchError, flatten_checkpoint, load_state_dict_loudly
from .safe_load import CorruptCheckpointError, UnsafeCheckpointError
from .vit import DENSEVIT_MODEL, densevit_model_layout

# what tools/train.py and tools/test.py report in one line instead of a traceback
CHECKPOINT_ERRORS = (CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError)

# modules of this package with model_layouts(state_dict)
FAMILIES = ('detr', 'deformable_detr', 'mit', 'setr')

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
        ValueError: no layout fits, or (``strict``) the best one leaves keys
            unexplained; the message names the layout, how many keys it understood
            and the first it did not.
    """
    state_dict = drop_non_weights(state_dict, logger=logger)
    return convert_state_dict(state_dict, model_layouts(state_dict), 'whole-model checkpoint',
                              strict, logger=logger)


def load_model_weights(model, checkpoint, source, strict=True, logger='current'):
    """Load a whole-model checkpoint object into ``model``, converting its layout if needed.

    Args:
        model (nn.Module): a detector or segmentor (not wrapped).
        checkpoint (dict): as loaded from ``source`` (``{'state_dict', 'meta', ...}``
            as mmengine saves it, or a bare state dict).
        source (str): the file, for messages.
        strict (bool): raise when anything is missing, unexpected or of the wrong
            shape (``tools/test.py``, ``init_model``); else report it (fine-tuning
            with ``load_from``).

    Returns:
        LoadReport (see :mod:`densevit.checkpoint.load`).
    """
    state_dict = drop_non_weights(flatten_checkpoint(checkpoint, source), source, logger)
    meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
    own = set(model.state_dict())
    if not own.issuperset(state_dict):  # not densevit's own layout
        try:
            state_dict = convert_model(state_dict, strict=True, logger=logger)
        except ValueError as e:
            if 'match no known layout' not in str(e):
                raise CheckpointMismatchError(f'{source}: {e}') from None
            # no foreign layout either: loaded as it is, so the report names the mismatch
    return load_state_dict_loudly(model, state_dict, source, strict=strict, min_found=0.5,
                                  described=describe_meta(meta), logger=logger)


def describe_meta(meta):
    """What a checkpoint's mmengine ``meta`` says it is, e.g. ``mmseg 1.2.2
    EncoderDecoder(MixVisionTransformer, SegformerHead)``; None when it says nothing."""
    if not isinstance(meta, dict):
        return None
    library = next((f'{k[:-8]} {v}' for k, v in meta.items()  # 'mmseg_version': 'mmseg'
                    if k.endswith('_version') and k != 'mmengine_version'), None)
    model = _model_cfg(meta.get('cfg'))
    if not model:
        return library and f'{library} model'
    parts = [model[k].get('type') for k in ('backbone', 'neck', 'decode_head', 'bbox_head')
             if isinstance(model.get(k), dict)]
    shown = f"{model.get('type')}({', '.join(p for p in parts if p)})"
    return f'{library} {shown}' if library else f'{shown}, from its meta'


def _model_cfg(text):
    """The ``model`` dict of a config saved as text in a checkpoint's meta, or None."""
    if not isinstance(text, str) or 'model' not in text:
        return None
    from mmengine.config import Config
    try:
        model = Config.fromstring(text, '.py').get('model')
    except Exception:  # noqa: BLE001 - any config text we cannot read just goes unnamed
        return None
    return model if isinstance(model, dict) else None


# backbone-only converters, tried when no whole-model layout fits
_BACKBONES = (('vit', 'convert_vit'), ('swin', 'convert_swin'), ('mit', 'convert_mit'))


def convert_any(state_dict, strict=True, logger='current'):
    """A whole model (:func:`convert_model`) or, when no whole-model layout fits, a backbone.

    Raises:
        ValueError: neither; or a densevit detector / segmentor, which needs no conversion
            (the ViT converter would take its backbone alone). The message lists the first
            keys.
    """
    try:
        return convert_model(state_dict, strict=strict, logger=logger)
    except ValueError as e:
        if 'match no known layout' not in str(e):
            raise
    if densevit_model_layout(state_dict) is DENSEVIT_MODEL:
        raise ValueError('the keys are a densevit detector / segmentor\'s own: it needs no '
                         'conversion (tools/test.py, init_model and load_from take it as it is; '
                         'a ViT\'s init_cfg takes its backbone). First keys: '
                         f'{list(state_dict)[:_SHOW]}')
    for module_name, fn in _BACKBONES:
        convert = getattr(importlib.import_module(f'{__package__}.{module_name}'), fn)
        try:
            return convert(state_dict, strict=strict)
        except ValueError as e:
            if 'match no known layout' not in str(e):
                raise
    raise ValueError(f'the keys match no known whole-model or backbone layout; first keys: '
                     f'{list(state_dict)[:_SHOW]}')
