"""Hugging Face ViTDet checkpoints (Li et al. 2022) -> densevit's
:class:`~densevit.models.backbones.vit.VisionTransformer` with windowed attention; and the
check, shared with SAM's files (:mod:`densevit.checkpoint.sam`), that a file's decomposed
relative position tables fit the model's windows.

``VitDetModel`` and ``VitDetBackbone`` (the same keys), as ``save_pretrained`` writes them:

=====================================================  =====================================
Hugging Face                                           densevit
=====================================================  =====================================
``embeddings.position_embeddings`` [1, 1 + h*w, D]     ``pos_embed.weight`` [1, h*w, D]
                                                       (the class-token row dropped)
``embeddings.projection``                              ``patch_embed.proj``
``encoder.layer.N.norm1`` / ``norm2``                  ``blocks.N.norm1`` / ``norm2``
``encoder.layer.N.attention.qkv`` / ``proj``           ``blocks.N.attn.qkv`` / ``proj``
``encoder.layer.N.attention.rel_pos_h`` / ``_w``       ``blocks.N.attn.rel_pos_h`` / ``_w``
``encoder.layer.N.mlp.fc1`` / ``fc2``                  ``blocks.N.mlp.fc1`` / ``fc2``
``encoder.layer.N.residual.{conv,norm}{1,2,3}``        ``blocks.N.residual.{conv,norm}{1,2,3}``
=====================================================  =====================================

The densevit ViT these files fit (the file's ``config.json`` on the left):

- ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``mlp_ratio``:
  ``arch=dict(embed_dims, num_layers, num_heads, feedforward_channels=mlp_ratio *
  hidden_size)``; ``patch_size``; ``with_cls_token=False`` (ViTDet has no class token: its
  table's first row is a pre-training leftover that HF drops at every forward);
  ``final_norm=False`` (no norm after the last layer); ``layer_norm_eps`` (1e-6 by default);
- ``image_size``: ``img_size`` (a global layer's decomposed tables span its grid);
  ``pretrain_image_size``: ``pos_grid`` (its side / ``patch_size``), the table kept as
  trained and resized bicubically to each input's grid, as HF does;
- ``window_size``; ``window_block_indices``: every other layer is global, i.e.
  ``global_attn_indexes`` is their complement; ``use_relative_position_embeddings``:
  ``decomposed_rel_pos``; ``residual_block_indices``: ``residual_block_indexes``;
  ``use_absolute_position_embeddings=False``: ``pos_embed=None``;
- ``VitDetBackbone``: stage ``i`` is the output of layer ``i - 1`` (``out_indices`` one
  less); its ``stem`` stage (the embeddings) has no densevit counterpart.
"""
import re

from . import dinov2
from .layout import Layout
from .match import CheckpointMismatchError


def attention_rules(layer, attention):
    """ViTDet-style attention under ``layer`` (a regex ending in ``.``, its one group the
    layer index) and ``attention`` (the attention module's name): the fused ``qkv``, the
    output ``proj`` and the decomposed tables, all as densevit names them."""
    attn = layer + attention + r'\.'
    return [
        (attn + r'(qkv|proj)\.(weight|bias)', r'blocks.\1.attn.\2.\3'),
        (attn + r'(rel_pos_[hw])', r'blocks.\1.attn.\2'),
    ]


_LAYER = r'encoder\.layer\.(\d+)\.'
_RULES = [
    (r'embeddings\.position_embeddings', 'pos_embed.weight'),
    (r'embeddings\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
    *attention_rules(_LAYER, 'attention'),
    *dinov2.layer_rules(_LAYER),  # norm1 / norm2, mlp.fc1 / fc2
    (_LAYER + r'residual\.((?:conv|norm)[123])\.(weight|bias)', r'blocks.\1.residual.\2.\3'),
]


def _drop_class_row(state_dict):
    """HF keeps a class-token row first in the table (its pre-training had a class token)
    and drops it at every forward: drop it once here."""
    table = state_dict.get('pos_embed.weight')
    if table is not None:
        state_dict['pos_embed.weight'] = table[:, 1:]
    return state_dict


HF_VITDET = Layout('Hugging Face ViTDet', r'^encoder\.layer\.\d+\.attention\.qkv\.weight$',
                   _RULES, post=_drop_class_row,
                   options={'layer_norm_eps': 1e-6, 'interpolate_mode': 'bicubic'})

LAYOUTS = (HF_VITDET,)


def _span(rows):
    return (rows + 1) // 2


def check_rel_pos(module, state_dict, source, what='a checkpoint'):
    """Refuse, in one line naming both, a file whose decomposed relative positions or
    residual blocks cannot fit ``module`` (a ViT in densevit's layout):

    - tables in the file, none in the model (``decomposed_rel_pos=False``);
    - a layer that attends in windows of M here, whose file table spans another size (the
      file's window, or its global grid: another ``window_size`` or
      ``global_attn_indexes``). A global layer's table of another span is resized on load
      (the grid of another image size), as the references resize it for other inputs;
    - residual blocks (``blocks.N.residual.*``) at layers where the model has none.

    Files without tables (MAE's) pass: the model's tables start at zero.
    """
    pattern = re.compile(r'blocks\.(\d+)\.(attn\.rel_pos_h$|residual\.)')
    found = {}
    for key in state_dict:
        m = pattern.match(key)
        if m and int(m[1]) < len(module.blocks):
            found.setdefault(m[2], {})[int(m[1])] = key
    tables, residual = found.get('attn.rel_pos_h', {}), found.get('residual.', {})
    for i, key in sorted(tables.items()):
        attn = module.blocks[i].attn
        span = _span(state_dict[key].shape[0])
        if getattr(attn, 'rel_pos_hw', None) is None:
            raise CheckpointMismatchError(
                f"{source} does not fit this ViT: it is {what} with decomposed relative "
                f"positions ({key}), the model's ViT has none (decomposed_rel_pos=False); "
                f"build the ViT with decomposed_rel_pos=True")
        window = attn.window_size
        if window and span != window:
            raise CheckpointMismatchError(
                f"{source} does not fit this ViT: it is {what} whose layer {i} has relative "
                f"positions spanning {span} ({key}), the model's ViT attends there in windows "
                f"of {window} (window_size={window}); build the ViT with window_size={span}, "
                f"or with layer {i} in global_attn_indexes if it is global in the file")
    extra = sorted(i for i in residual if not hasattr(module.blocks[i], 'residual'))
    if extra:
        own = sorted(i for i, b in enumerate(module.blocks) if hasattr(b, 'residual'))
        raise CheckpointMismatchError(
            f"{source} does not fit this ViT: it is {what} with residual blocks after layers "
            f"{sorted(residual)}, the model's ViT has them after {own} "
            f"(residual_block_indexes); build the ViT with "
            f"residual_block_indexes={tuple(sorted(residual))}")
