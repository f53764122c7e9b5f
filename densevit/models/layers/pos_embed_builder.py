"""One entry point for the position-embedding family (ViT paper, App. D.4).

A config names a type and, for encoders, a placement::

    pos_embed=dict(type='learned_2d', placement='every_layer_shared')

Types (``POSITION_EMBEDDING_TYPES``):
    none        no position information.
    learned_1d  one learned vector per patch, raster order (ViT default).
    learned_2d  learned X- and Y-embeddings of D/2 each, concatenated per patch.
    sincos_2d   fixed 2D sine-cosine (MAE), no parameters.
    relative    learned per-head bias for each 2D query-key offset, added to
                the attention logits (as SDPA's float ``attn_mask``).
    rope        2D rotary embedding of queries and keys in every attention layer
                (``RotaryPositionEmbedding2D``: EVA-02's or DINOv3's convention,
                RoPE-Mixed's learned frequencies); no parameters unless mixed.
    sine_2d     DETR's mask-aware sine encoding of a feature map
                (``SinePositionalEncoding2D``): it encodes a padding mask, not
                tokens, so it serves DETR's transformer, not ViT.

Placements (``PLACEMENTS``), for the absolute types:
    stem                once, after the patch embedding (the default).
    every_layer         before every encoder layer, each layer its own table.
    every_layer_shared  before every encoder layer, one table for all.
For ``relative`` the bias always acts inside every layer's attention, so the
placement only chooses ``every_layer`` (one table per layer, the default for
this type) or ``every_layer_shared`` (one table); ``stem`` is an error.
``rope`` rotates queries and keys inside each attention layer, so its placement is
``every_layer`` (the default for this type; a fixed rotation is computed once per
forward and used by every layer, RoPE-Mixed has one module per layer);
``stem`` and ``every_layer_shared`` are errors.
A fixed table (``sincos_2d``) placed at every layer is the same table each time.
"""
from .pos_embed import LearnedPositionEmbedding
from .pos_embed_2d import Learned2DPositionEmbedding, SinCos2DPositionEmbedding
from .relative_position import RelativePositionBias
from .rope_2d import RotaryPositionEmbedding2D
from .sine_position_encoding import SinePositionalEncoding2D

ABSOLUTE_TYPES = {
    'learned_1d': LearnedPositionEmbedding,
    'learned_2d': Learned2DPositionEmbedding,
    'sincos_2d': SinCos2DPositionEmbedding,
}
POSITION_EMBEDDING_TYPES = ('none', *ABSOLUTE_TYPES, 'relative', 'rope', 'sine_2d')
PLACEMENTS = ('stem', 'every_layer', 'every_layer_shared')
_RESIZABLE = ('learned_1d', 'learned_2d', 'relative')  # types taking ``interpolate_mode``
_ROPE_MISPLACED = {'stem': 'a code added once to the tokens after the patch embedding',
                   'every_layer_shared': 'one table for all layers, where a fixed RoPE '
                                         'already is one rotation for all and RoPE-Mixed '
                                         'learns one per layer'}


def parse_position_embedding_cfg(cfg):
    """Validate a position-embedding config and fill in the default placement.

    Args:
        cfg (dict | str | None): ``dict(type=..., placement=..., **type_kwargs)``,
            a bare type name, or None (= 'none').

    Returns:
        tuple: (type, placement, type_kwargs); placement is None for 'none'
        and 'sine_2d'.
    """
    if cfg is None:
        cfg = dict(type='none')
    elif isinstance(cfg, str):
        cfg = dict(type=cfg)
    cfg = dict(cfg)
    pe_type = cfg.pop('type', None)
    placement = cfg.pop('placement', None)
    if pe_type not in POSITION_EMBEDDING_TYPES:
        raise ValueError(f'Unknown position embedding type {pe_type!r}; valid types: '
                         f'{", ".join(POSITION_EMBEDDING_TYPES)}')
    if placement is not None and placement not in PLACEMENTS:
        raise ValueError(f'Unknown position embedding placement {placement!r}; valid '
                         f'placements: {", ".join(PLACEMENTS)}')
    if pe_type in ('none', 'sine_2d'):
        return pe_type, None, cfg
    if pe_type == 'relative':
        if placement == 'stem':
            raise ValueError("A relative position bias acts inside every layer's attention and "
                             "cannot be placed at the stem; use placement='every_layer' (one "
                             "table per layer) or 'every_layer_shared' (one table).")
        return pe_type, placement or 'every_layer', cfg
    if pe_type == 'rope':
        if placement in ('stem', 'every_layer_shared'):
            raise ValueError(f"RoPE rotates queries and keys inside each attention layer; "
                             f"placement {placement!r} ({_ROPE_MISPLACED[placement]}) makes no "
                             f"sense for it: use placement='every_layer' (the default for "
                             f"'rope').")
        return pe_type, 'every_layer', cfg
    return pe_type, placement or 'stem', cfg


def build_position_embedding(cfg, embed_dims, grid_hw=None, num_heads=None, num_extra_tokens=0,
                             interpolate_mode='bicubic'):
    """Build one member of the family (one table; placement is the caller's job).

    Args:
        cfg (dict | str | None): see :func:`parse_position_embedding_cfg`; a
            ``placement`` key is accepted and ignored here.
        embed_dims (int): token width D.
        grid_hw (tuple[int, int]): patch grid the table is made for.
        num_heads (int): attention heads (``relative`` and ``rope``).
        num_extra_tokens (int): E tokens before the grid (e.g. 1 class token).
        interpolate_mode (str): resize mode for learned tables, unless ``cfg``
            sets its own.

    Returns:
        nn.Module | None: None for 'none'. Absolute types have
        ``kind = 'absolute'``, ``table(hw) -> [1, E + h*w, D]`` and
        ``forward(tokens, hw)``; relative has ``kind = 'relative'`` and
        ``bias(hw) -> [1, heads, E + h*w, E + h*w]``; rope has ``kind = 'rotary'``
        and ``rotation(hw, like)`` (cos / sin [1, 1 or heads, E + h*w, d/2]); sine_2d
        maps a padding mask [B, H, W] to [B, D, H, W].
    """
    pe_type, _, kwargs = parse_position_embedding_cfg(cfg)
    if pe_type == 'none':
        return None
    if pe_type == 'sine_2d':
        return SinePositionalEncoding2D(**{'num_feats': embed_dims // 2, **kwargs})
    if grid_hw is None:
        raise ValueError(f'position embedding {pe_type!r} needs grid_hw')
    if pe_type in _RESIZABLE:
        kwargs.setdefault('interpolate_mode', interpolate_mode)
    if pe_type in ('relative', 'rope') and num_heads is None:
        raise ValueError(f'position embedding {pe_type!r} needs num_heads')
    if pe_type == 'relative':
        return RelativePositionBias(grid_hw, num_heads, num_extra_tokens, **kwargs)
    if pe_type == 'rope':
        return RotaryPositionEmbedding2D(grid_hw, embed_dims, num_heads, num_extra_tokens,
                                         **kwargs)
    return ABSOLUTE_TYPES[pe_type](grid_hw, embed_dims, num_extra_tokens, **kwargs)
