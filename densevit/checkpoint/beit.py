"""Hugging Face BEiT (Bao et al. 2022) and Data2VecVision (Baevski et al. 2022, BEiT's layout)
checkpoints -> densevit's :class:`~densevit.models.backbones.vit.VisionTransformer`.

``BeitModel``, ``BeitBackbone``, ``Data2VecVisionModel`` and the whole models that nest them
under ``beit.`` / ``data2vec_vision.`` (``*ForImageClassification``,
``*ForSemanticSegmentation``, ``BeitForMaskedImageModeling``), in the Hub file layout (what
``save_pretrained`` writes) and in transformers 5's module layout:

=================================================================  ==============================
Hugging Face                                                       densevit
=================================================================  ==============================
``embeddings.cls_token`` [1, 1, D]                                 ``cls_token``
``embeddings.position_embeddings`` [1, 1 + h*w, D] (absolute)      ``pos_embed.weight``
``embeddings.patch_embeddings.projection``                         ``patch_embed.proj``
``encoder.layer.N.layernorm_before`` / ``layernorm_after``         ``blocks.N.norm1`` / ``norm2``
``...attention.attention.{query,key,value}``                       ``blocks.N.attn.qkv`` (fused)
  (module: ``layers.N.attention.{q,k,v}_proj``)
``...{query,value}.bias``, no ``key.bias``                         ``blocks.N.attn.q_bias``, ``v_bias``
``...attention.output.dense`` (module: ``o_proj``)                 ``blocks.N.attn.proj``
``...intermediate.dense`` / ``output.dense`` (``mlp.fc1`` / ``fc2``)  ``blocks.N.mlp.fc1`` / ``fc2``
``...lambda_1`` / ``lambda_2``                                     ``blocks.N.ls1.gamma`` / ``ls2.gamma``
``...attention.attention.relative_position_bias.`` (module:        ``pos_embed.N.`` (every_layer):
  ``layers.N.relative_position_bias.``) ``relative_position_bias_``  ``relative_position_bias_table``
  ``table`` [(2h-1)(2w-1) + 3, heads]                                [(2h-1)(2w-1), heads] and
                                                                     ``extra_token_table`` [3, heads]
``encoder.relative_position_bias.relative_position_bias_table``    ``pos_embed.`` the same two
  (module: ``shared_position_bias.``; one for all layers)            (every_layer_shared)
``layernorm`` (absent with ``use_mean_pooling``)                   ``norm``
=================================================================  ==============================

BEiT's relative position bias is densevit's ``relative`` position embedding with learned
class-token entries: the table's first (2h-1)(2w-1) rows are indexed by
``(dy + h-1)(2w-1) + dx + w-1`` as densevit's, and its last three rows are the class token's
entries in the order class->patch, patch->class, class->class, those of ``extra_token_table``.
Hugging Face resizes the offset rows bilinearly (``align_corners=False``) from the config's
grid to each input's grid (``H // P, W // P``) at every forward, whatever
``interpolate_pos_encoding`` says; its absolute table bicubically, also always. (For a config
``image_size`` that is not square, HF reads its own table's offset image with the two sides
swapped; densevit does not copy that: equal to HF for square config sizes, as every released
model has.)

Dropped, with a logged reason: ``embeddings.mask_token`` (masked image modelling), the pooler's
``layernorm`` (the norm of the mean-pooled feature, ``use_mean_pooling``: not a per-token
norm), ``classifier``, ``lm_head`` and the masked-image-modelling model's own top-level
``layernorm`` (its head), the feature pyramid of ``BeitBackbone`` with ``add_fpn`` and of
``*ForSemanticSegmentation`` (``fpn1`` / ``fpn2``; a neck, not part of the ViT: densevit's
maps are the layers' outputs before it, and the config brings its own neck),
``decode_head`` / ``auxiliary_head`` (the segmentation heads), stored
``relative_position_index`` buffers (computed from the grid).

The densevit ViT these files fit (the file's ``config.json`` on the left):

- ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``:
  ``arch=dict(embed_dims, num_layers, num_heads, feedforward_channels)``; ``patch_size``;
  ``image_size``: ``img_size`` (the table's grid; or ``pos_grid='checkpoint'``);
- ``qkv_bias=(True, False, True)``: BEiT's key projection has no bias;
- ``use_relative_position_bias``: ``pos_embed=dict(type='relative')`` (every_layer);
  ``use_shared_relative_position_bias``: ``dict(type='relative',
  placement='every_layer_shared')``; either with ``interpolate_mode='bilinear'`` (HF's resize).
  A file with a shared table loads into a per-layer model too: the table is copied into every
  layer's (BEiT's fine-tuning from its pre-trained weights; :func:`spread_shared_bias`).
  ``use_absolute_position_embeddings``: ``pos_embed=dict(type='learned_1d')`` with
  ``interpolate_mode='bicubic'``. A file with an absolute table and a relative bias together,
  or with both relative placements, is refused: densevit's ViT has one position code;
- ``layer_scale_init_value`` > 0: set (any non-zero value: the file brings its lambdas);
- ``use_mean_pooling=False``: ``final_norm=True`` (``last_hidden_state`` is normalised);
  ``True``: ``final_norm=False`` (no per-token final norm);
- ``BeitBackbone``: stage ``i`` is the output of layer ``i - 1`` (``out_indices`` one less),
  never normalised (``final_norm=False`` when the last layer is an output); the class token
  dropped, the patches reshaped to [B, D, H // P, W // P];
- ``layer_norm_eps=1e-12`` (HF's default, the origin option recorded, with the resize mode).
"""
import math

from mmengine.logging import print_log

from .layout import Layout, hf_vit_drop, hf_vit_layer_rules, hf_vit_rules

_TABLE = 'relative_position_bias_table'
# a BEiT table's rows after the (2h-1)(2w-1) offsets: class->patch, patch->class, class->class
CLASS_ENTRIES = 3
_WRAPPED = r'(?:beit\.|data2vec_vision\.)'  # BeitModel inside a whole model


def _rules(prefix):
    layer = prefix + r'(?:encoder\.layer|layers)\.(\d+)\.'
    return [
        *hf_vit_rules(prefix),
        *hf_vit_layer_rules(layer),
        (layer + r'lambda_(1|2)', r'blocks.\1.ls\2.gamma'),
        (layer + r'(?:attention\.attention\.)?relative_position_bias\.' + _TABLE,
         r'pos_embed.\1.' + _TABLE),
        (prefix + r'(?:encoder\.relative_position_bias|shared_position_bias)\.' + _TABLE,
         'pos_embed.' + _TABLE),
    ]


def _drop(prefix):
    return {
        **hf_vit_drop(prefix),
        prefix + r'pooler\..*': 'norm of the mean-pooled patch tokens (use_mean_pooling; '
                                'classification), not a per-token norm',
        r'.*relative_position_index': 'relative position index buffer (computed from the grid)',
        r'fpn[12]?\..*': "the feature pyramid of BeitBackbone (add_fpn) / a segmentation model: "
                         "a neck, not part of the ViT (densevit's maps are the layers' outputs "
                         "before it; the config brings its own neck)",
        r'(decode_head|auxiliary_head)\..*': 'segmentation heads (not part of the backbone)',
    }


def split_class_entries(state_dict):
    """Each BEiT table [(2h-1)(2w-1) + 3, heads] -> densevit's ``relative_position_bias_table``
    (the offsets) and ``extra_token_table`` (its last three rows); a file with two position
    codes refused."""
    tables = [k for k in state_dict if k.endswith(_TABLE)]
    for key in tables:
        table = state_dict[key]
        state_dict[key] = table[:-CLASS_ENTRIES]
        state_dict[key[:-len(_TABLE)] + 'extra_token_table'] = table[-CLASS_ENTRIES:]
    placements = {'every_layer_shared' if k == 'pos_embed.' + _TABLE else 'every_layer'
                  for k in tables}
    if (tables and 'pos_embed.weight' in state_dict) or len(placements) > 1:
        codes = ['an absolute position table'] * ('pos_embed.weight' in state_dict) + [
            f'a relative position bias ({p})' for p in sorted(placements)]
        raise ValueError(f'a BEiT checkpoint with {" and ".join(codes)}: densevit\'s '
                         f'VisionTransformer has one position code (pos_embed) and cannot '
                         f'compute this model')
    return state_dict


def beit_options(state_dict):
    """The origin options: HF's LayerNorm eps, and how HF resizes the file's position code
    (the relative bias bilinearly, an absolute table bicubically)."""
    relative = any(k.endswith(_TABLE) for k in state_dict)
    return {'layer_norm_eps': 1e-12, 'interpolate_mode': 'bilinear' if relative else 'bicubic'}


_PREFIX = _WRAPPED + '?'
_SIGNATURE = (r'(^|\.)(encoder\.layer|layers)\.\d+\.(lambda_1$|(attention\.attention\.)?'
              r'relative_position_bias\.)|(^|\.)(encoder\.relative_position_bias|'
              r'shared_position_bias)\.|^' + _WRAPPED)
HF_BEIT = Layout('Hugging Face BEiT', _SIGNATURE, _rules(_PREFIX), drop=_drop(_PREFIX),
                 post=split_class_entries, options=beit_options)
# BeitForMaskedImageModeling: the model under beit., its head's norm and classifier at the top
# (the model's own final norm, where it has one, is beit.layernorm)
HF_BEIT_MIM = Layout(
    'Hugging Face BEiT (masked image modelling)', r'^lm_head\.weight$', _rules(_WRAPPED),
    drop={**_drop(_WRAPPED), r'layernorm\..*|lm_head\..*':
          'masked-image-modelling head (its norm and visual-token classifier; pre-training only)'},
    post=split_class_entries, options=beit_options)

# the head's layout first: a BEiT layout would read its norm as the model's
LAYOUTS = (HF_BEIT_MIM, HF_BEIT)


def spread_shared_bias(module, state_dict, prefix):
    """A shared relative position bias (``pos_embed.relative_position_bias_table``,
    ``extra_token_table``) loaded into ``module``, a ViT with one bias per layer
    (``pos_embed.N.*``): copied into every layer's, in place in ``state_dict``, as BEiT
    fine-tunes from its pre-trained weights. Anything else is left as it is."""
    shared = {name: state_dict.get(f'{prefix}pos_embed.{name}')
              for name in (_TABLE, 'extra_token_table')}
    if shared[_TABLE] is None or f'{prefix}pos_embed.0.{_TABLE}' in state_dict:
        return
    for name, tensor in shared.items():
        state_dict.pop(f'{prefix}pos_embed.{name}', None)
        for i in range(len(module.pos_embed)):
            if tensor is not None:
                state_dict[f'{prefix}pos_embed.{i}.{name}'] = tensor.clone()
    print_log(f'{prefix}pos_embed: the shared relative position bias copied into each of the '
              f"{len(module.pos_embed)} layers' own (as BEiT fine-tunes its pre-trained "
              f'weights)', logger='current')


def relative_grid(state_dict):
    """The square grid (s, s) that a converted relative position table (shared or layer 0's:
    (2s-1)^2 offset rows) was made for; None without one."""
    table = state_dict.get(f'pos_embed.{_TABLE}', state_dict.get(f'pos_embed.0.{_TABLE}'))
    if table is None:
        return None
    rows = table.shape[0]
    span = math.isqrt(rows)
    if span * span != rows or span % 2 == 0:
        raise ValueError(f'a relative position table of {rows} offset rows is not a square '
                         f'grid\'s ((2s-1)^2); give pos_grid=(h, w)')
    return (span + 1) // 2, (span + 1) // 2
