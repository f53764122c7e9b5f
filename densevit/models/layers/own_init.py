"""A module whose own initialisation runs after its children's (``init_weights``)."""


class ResetAfterChildrenInit:
    """Mixin for an mmengine ``BaseModule`` with a ``_reset_parameters``: ``init_weights``
    runs the children's own init (e.g. ``ConvModule``'s Kaiming), then
    ``_reset_parameters`` again, so the module's documented init holds after the Runner's
    ``init_weights``; an ``init_cfg`` overrides both. Put it before ``BaseModule``."""

    def init_weights(self):
        reset = not self._is_init and self.init_cfg is None
        super().init_weights()
        if reset:
            self._reset_parameters()
