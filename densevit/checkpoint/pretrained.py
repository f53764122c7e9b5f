"""``init_cfg=dict(type='Pretrained')`` on a backbone: read, convert, match, report.

mmengine's own ``Pretrained`` loads with ``strict=False`` and reports missing or
unexpected keys in a log line that is easy to miss; a checkpoint in another key layout
then leaves the backbone at its random initialisation without anyone noticing. A
backbone whose ``init_weights`` is wrapped by :func:`loads_pretrained` instead reads
the file once (:mod:`.read`), converts its layout (the backbone's converter, e.g.
:func:`densevit.checkpoint.swin.convert_swin`), and matches it against the module
(:mod:`.match`), logging WARNING lines with counts and the first keys of everything
missing, unexpected or of the wrong shape, and one line per origin option (LayerNorm
eps, Swin's shift rule) where the file's origin differs from the config.

Usage in a backbone::

    @loads_pretrained(convert_swin)
    def init_weights(self):
        ...  # the random initialisation, as before
"""
import functools

from .convert import origin_and_options
from .match import load_into
from .read import checkpoint_meta, flatten_checkpoint, load_checkpoint_safely, select_prefix


def load_pretrained(module, checkpoint, convert=None, prefix=None, expected_missing=(),
                    map_location='cpu', strict=False, check=None, logger='current'):
    """Load a checkpoint file or URL into ``module``, converting its layout, and report.

    Args:
        module (nn.Module): the backbone.
        checkpoint (str): file path or URL (``.pth``, ``.safetensors``).
        convert (callable, optional): ``state_dict -> state_dict`` in densevit's layout.
        prefix (str, optional): take only keys under this prefix (e.g. 'backbone.' from a
            whole detector), prefix removed.
        expected_missing (Iterable[str]): key prefixes this checkpoint kind is known not
            to have: reported at INFO level, not WARNING.
        strict (bool): raise instead of warning when anything does not match.
        check (callable, optional): ``check(module, state_dict, source, what)`` on the
            converted tensors before loading (e.g.
            :func:`densevit.checkpoint.vit.check_vit_size`: another width or depth).

    Returns:
        LoadReport (:mod:`densevit.checkpoint.match`).
    """
    source = str(checkpoint)
    obj = load_checkpoint_safely(source, map_location=map_location)
    state_dict = select_prefix(flatten_checkpoint(obj, source), prefix)
    if convert is not None:
        state_dict = convert(state_dict)
    origin, options = origin_and_options(module, state_dict, checkpoint_meta(obj), source,
                                         logger)
    return load_into(module, state_dict, source, origin=origin, options=options,
                     expected_missing=expected_missing, strict=strict, check=check,
                     logger=logger)


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
