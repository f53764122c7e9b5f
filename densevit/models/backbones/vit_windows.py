"""The ViTDet / SAM options of :class:`~densevit.models.backbones.vit.VisionTransformer`:
which layers attend in windows, which carry decomposed relative position tables of which
span, which are followed by a residual convolution block; checked once, at build time.

They are options of the encoder layers rather than a member of the position-embedding
family (``pos_embed``): ViTDet and SAM add a learned absolute table at the stem *and*
the decomposed relative term in every layer, and that term is computed inside attention
from the queries (:mod:`densevit.models.layers.vitdet_attention`), with a span that
differs between windowed and global layers.
"""
from densevit.models.layers.vit_block import TransformerEncoderLayer
from densevit.models.layers.vitdet_residual import ResidualBottleneckLayer


def _layer_set(indexes, num_layers, name):
    """``indexes`` (negative counting from the end) -> a set of layer numbers, or an error."""
    out = set()
    for i in indexes:
        if not -num_layers <= i < num_layers:
            raise IndexError(f'{name} entry {i} out of range for {num_layers} layers')
        out.add(i % num_layers)
    return out


def grid_layer_options(num_layers, grid_hw, window_size=0, global_attn_indexes=(),
                       decomposed_rel_pos=False, residual_block_indexes=(),
                       num_extra_tokens=0, pos_embed_type='learned_1d'):
    """Per layer: (block class, extra keyword arguments of the block).

    Args:
        num_layers (int): depth.
        grid_hw (tuple[int, int]): the patch grid of the model's ``img_size``: the span of a
            global layer's decomposed tables.
        window_size (int): M (0: every layer global).
        global_attn_indexes (Sequence[int]): layers that stay global when M > 0.
        decomposed_rel_pos (bool): ``rel_pos_h`` / ``rel_pos_w`` in every layer, spanning
            (M, M) in a windowed layer, ``grid_hw`` in a global one.
        residual_block_indexes (Sequence[int]): layers followed by ViTDet's residual
            bottleneck.
        num_extra_tokens (int): class + register tokens (must be 0 with any of the above).
        pos_embed_type (str): the ``pos_embed`` type (RoPE and a relative bias do not
            combine with the above).

    Raises:
        ValueError / IndexError: an option out of range or a combination that cannot work,
            in one line naming it.
    """
    if window_size < 0:
        raise ValueError(f'window_size must be >= 0 (0: global attention), got {window_size}')
    if global_attn_indexes and not window_size:
        raise ValueError('global_attn_indexes names the layers that stay global among windowed '
                         'ones: it needs window_size > 0')
    global_layers = _layer_set(global_attn_indexes, num_layers, 'global_attn_indexes')
    residual = _layer_set(residual_block_indexes, num_layers, 'residual_block_indexes')
    if not (window_size or decomposed_rel_pos or residual):
        return [(TransformerEncoderLayer, {}) for _ in range(num_layers)]
    used = ', '.join(name for name, on in (('window_size', window_size),
                                           ('decomposed_rel_pos', decomposed_rel_pos),
                                           ('residual_block_indexes', residual)) if on)
    if num_extra_tokens:
        raise ValueError(f'{used} act on the patch grid alone: build the ViT with '
                         f'with_cls_token=False and num_register_tokens=0 (ViTDet and SAM have '
                         f'neither)')
    if pos_embed_type in ('rope', 'relative'):
        raise ValueError(f"pos_embed type {pos_embed_type!r} does not combine with {used}: "
                         f"use an absolute table ('learned_1d', as ViTDet and SAM), or "
                         f"decomposed_rel_pos=True for a relative position")
    options = []
    for i in range(num_layers):
        window = 0 if i in global_layers else window_size
        span = (window, window) if window else tuple(grid_hw)
        kwargs = dict(window_size=window, rel_pos_hw=span if decomposed_rel_pos else None)
        block = ResidualBottleneckLayer if i in residual else TransformerEncoderLayer
        options.append((block, kwargs))
    return options


def uses_grid_layers(vit):
    """Whether a ViT has windowed / decomposed-position / residual layers, which need the
    whole patch grid in every forward (no MAE subset of tokens)."""
    return any(isinstance(b, ResidualBottleneckLayer) or hasattr(b.attn, 'window_size')
               for b in vit.blocks)


def rel_pos_keys(vit):
    """The decomposed tables' state-dict keys of a ViT (absent from files without them, e.g.
    MAE's: they then start at zero, as ViTDet's fine-tuning does)."""
    return [f'blocks.{i}.attn.rel_pos_' for i, b in enumerate(vit.blocks)
            if getattr(b.attn, 'rel_pos_hw', None) is not None]
