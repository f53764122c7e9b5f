"""``DEFAULT``: "use the documented default" for a config-dict argument.

A dict literal as an argument default is one object shared by every call, so a
callee that mutates it changes the default of all later calls. Config
arguments therefore take ``DEFAULT`` in the signature and resolve it first
thing in the body, which builds a fresh dict on every call::

    from densevit.utils.defaults import DEFAULT, resolve_default

    def __init__(self, norm_cfg=DEFAULT):
        norm_cfg = resolve_default(norm_cfg, dict(type='BN'))

``None`` keeps whatever meaning it had (for many of these arguments: no norm
layer, no position embedding, ...), which ``norm_cfg = norm_cfg or dict(...)``
would silently turn into the default. The default itself is documented in the
argument's docstring.
"""
import copy

__all__ = ['DEFAULT', 'resolve_default']


class _DefaultType:
    """Type of the :data:`DEFAULT` singleton; copies and unpickles to itself."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return 'DEFAULT'

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return 'DEFAULT'


DEFAULT = _DefaultType()


def resolve_default(value, default):
    """``value`` as given, or a deep copy of ``default`` when it is :data:`DEFAULT`.

    Args:
        value: the argument a caller passed (None and any other value pass through
            unchanged, not copied).
        default: the documented default; copied, so callers never share it.
    """
    return copy.deepcopy(default) if value is DEFAULT else value
