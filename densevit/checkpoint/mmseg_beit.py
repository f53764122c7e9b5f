"""MMSegmentation 1.x ``BEiT`` (``mmseg/models/backbones/beit.py``; the backbone of its
``configs/beit/beit-{base,large}_upernet_*`` models) -> densevit's
:class:`~densevit.models.backbones.vit.VisionTransformer`.

================================================  ========================================
mmseg                                             densevit
================================================  ========================================
``cls_token`` [1, 1, D]                           ``cls_token``
``patch_embed.projection`` (with a bias)          ``patch_embed.proj``
``layers.N.ln1`` / ``ln2``                        ``blocks.N.norm1`` / ``norm2``
``layers.N.attn.qkv.weight`` [3D, D] (no bias     ``blocks.N.attn.qkv.weight``
  with ``qv_bias``)
``layers.N.attn.q_bias`` / ``v_bias`` [D]         ``blocks.N.attn.q_bias`` / ``v_bias``
``layers.N.attn.proj``                            ``blocks.N.attn.proj``
``layers.N.gamma_1`` / ``gamma_2`` [D]            ``blocks.N.ls1.gamma`` / ``ls2.gamma``
``layers.N.ffn.layers.0.0`` / ``ffn.layers.1``    ``blocks.N.mlp.fc1`` / ``fc2``
``layers.N.attn.relative_position_bias_table``    ``pos_embed.N.relative_position_bias_table``
  [(2h-1)(2w-1) + 3, heads]                         [(2h-1)(2w-1), heads] and
                                                    ``extra_token_table`` [3, heads]
``ln1`` (final norm, only with ``final_norm``)    ``norm``
================================================  ========================================

Dropped: the stored ``relative_position_index`` buffers (computed from the grid).

Facts beyond renaming (checked in mmseg 1.2.2's ``beit.py``): the table is BEiT's own, as
Hugging Face's (:mod:`densevit.checkpoint.beit`): offset rows indexed ``(dy + h-1)(2w-1) +
dx + w-1``, then the class token's rows class->patch, patch->class, class->class; the
fused ``qkv`` is q, k, v in that order, heads contiguous within each, with a zero key bias;
the model these files fit is densevit's ViT with ``qkv_bias=(True, False, True)`` (or
``False`` for ``qv_bias=False``), ``layer_scale_init_value`` set, ``pos_embed=dict(type=
'relative')`` (one table per layer), ``with_cls_token=True``, ``final_norm`` as the file's
(``False`` in the zoo), and LayerNorm eps 1e-6 (the zoo's ``norm_cfg``; the origin option).
mmseg's BEiT builds its table's index for ``img_size // patch_size`` and never resizes it,
so it runs only on inputs of that patch grid (its patch convolution drops the rows and
columns that do not fill a patch: densevit's ``crop_to_patch=True``); densevit resizes the
table for other grids (``interpolate_mode``).
"""
from .beit import split_class_entries
from .layout import Layout
from .vit import MMSEG_RULES

_TABLE = 'relative_position_bias_table'
_LAYER = r'layers\.(\d+)\.'

RULES = [
    *MMSEG_RULES,
    (_LAYER + r'attn\.qkv\.(weight|bias)', r'blocks.\1.attn.qkv.\2'),
    (_LAYER + r'attn\.([qv]_bias)', r'blocks.\1.attn.\2'),
    (_LAYER + r'attn\.proj\.(weight|bias)', r'blocks.\1.attn.proj.\2'),
    (_LAYER + r'gamma_(1|2)', r'blocks.\1.ls\2.gamma'),
    (_LAYER + r'attn\.' + _TABLE, r'pos_embed.\1.' + _TABLE),
]
DROP = {_LAYER + r'attn\.relative_position_index':
        'relative position index buffer (computed from the grid)'}
OPTIONS = {'layer_norm_eps': 1e-6}

MMSEG_BEIT = Layout('MMSegmentation BEiT', r'^layers\.\d+\.gamma_1$', RULES, drop=DROP,
                    post=split_class_entries, options=OPTIONS)
