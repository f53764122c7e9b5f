"""Whole-model checkpoints (a detector or a segmentor with its heads), from any known origin.

:func:`load_model_weights` is what ``tools/test.py``, ``load_from`` and
:func:`densevit.apis.init_model` use. A checkpoint passes each step once: read
(:mod:`.read`, by the caller), converted when it is not in densevit's layout
(:mod:`.convert`), matched against the model (:mod:`.match`), and then loaded with a
report or, ``strict``, refused with an error listing what does not match.
"""
from .convert import convert_model, drop_non_weights, origin_and_options
from .layout import PartialLayoutError, UnknownLayoutError
from .match import CheckpointMismatchError, load_into
from .read import (
    CheckpointDownloadError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    checkpoint_meta,
    flatten_checkpoint,
)

# what tools/train.py and tools/test.py report in one line instead of a traceback
CHECKPOINT_ERRORS = (CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError,
                     CheckpointDownloadError)


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
        LoadReport (see :mod:`densevit.checkpoint.match`).
    """
    state_dict = drop_non_weights(flatten_checkpoint(checkpoint, source), source, logger)
    meta = checkpoint_meta(checkpoint)
    own = set(model.state_dict())
    if not own.issuperset(state_dict):  # not densevit's own layout
        try:
            state_dict = convert_model(state_dict, strict=True, logger=logger)
        except PartialLayoutError as e:
            raise CheckpointMismatchError(f'{source}: {e}') from None
        except UnknownLayoutError:
            pass  # no foreign layout either: loaded as it is, so the report names the mismatch
    origin, options = origin_and_options(model, state_dict, meta, source, logger)
    # a model may refuse a file it cannot use before anything loads (DETRPanoptic's frozen
    # detector needs all of its first stage)
    return load_into(model, state_dict, source, origin=origin, options=options,
                     described=describe_meta(meta), strict=strict, min_found=0.5,
                     check=getattr(model, 'check_checkpoint', None), logger=logger)


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
