"""Capture attention weights during an ordinary forward pass.

    with capture_attention(model) as rec:
        model.backbone(images)
    rec.self_attn      # list, one [B, h, N, N] per ViT attention call, in call order
    rec.cross_attn     # list, one [B, h, Q, N] per DETR decoder layer, in call order

Only while the context is active do the attention modules compute their
softmax weights explicitly (see ``MultiheadAttention.record`` and
``DetrDecoderLayer.record_cross_attn``); outside it they run their fast path
untouched. One forward pass fills every layer: no hooks re-run a layer.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field

from densevit.models.layers.attention import MultiheadAttention
from densevit.models.layers.detr_transformer import DetrDecoderLayer


@dataclass
class AttentionRecord:
    """What :func:`capture_attention` collected (weights detached, on their device)."""

    self_attn: list = field(default_factory=list)
    cross_attn: list = field(default_factory=list)

    def clear(self):
        """Drop what was recorded (call between batches to bound memory)."""
        self.self_attn.clear()
        self.cross_attn.clear()


@contextmanager
def capture_attention(model, self_attn=True, cross_attn=True):
    """Record attention weights of ``model``'s ViT self-attention and DETR cross-attention.

    Args:
        model (nn.Module): any model holding densevit ``MultiheadAttention`` or
            ``DetrDecoderLayer`` modules.
        self_attn, cross_attn (bool): which kinds to record.

    Yields:
        AttentionRecord. The recorders are removed on exit, even after an error.
    """
    rec = AttentionRecord()
    hooked = []
    for m in model.modules():
        if self_attn and isinstance(m, MultiheadAttention):
            m.record = lambda w: rec.self_attn.append(w.detach())
            hooked.append((m, 'record'))
        elif cross_attn and isinstance(m, DetrDecoderLayer):
            m.record_cross_attn = lambda w: rec.cross_attn.append(w.detach())
            hooked.append((m, 'record_cross_attn'))
    try:
        yield rec
    finally:
        for m, name in hooked:
            setattr(m, name, None)
