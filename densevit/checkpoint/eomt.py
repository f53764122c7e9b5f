"""Hugging Face ``EomtForUniversalSegmentation`` checkpoints (EoMT, Kerssies et al. 2025) ->
densevit's :class:`~densevit.models.segmentors.eomt.EoMT` with its ViT and
:class:`~densevit.models.heads.eomt_head.EoMTHead`.

The file ``save_pretrained`` writes (``model.safetensors``), a DINOv2-style ViT with the
queries and the mask module beside it (``L`` = ``layers.N.``, densevit ``B`` =
``backbone.blocks.N.``):

=============================================================  =================================
Hugging Face                                                   densevit
=============================================================  =================================
``embeddings.cls_token`` [1, 1, D]                             ``backbone.cls_token``
``embeddings.register_tokens`` [1, R, D]                       ``backbone.register_tokens``
``embeddings.patch_embeddings.projection``                     ``backbone.patch_embed.proj``
``embeddings.position_embeddings.weight`` [h*w, D]             ``backbone.pos_embed.weight``
                                                               [1, 1 + h*w, D], a zero class row
``L.norm1`` / ``norm2``, ``L.layer_scale{1,2}.lambda1``        ``B.norm1`` / ``norm2``,
                                                               ``B.ls{1,2}.gamma``
``L.attention.{q,k,v}_proj``                                   ``B.attn.qkv`` (fused q-k-v)
``L.attention.out_proj``                                       ``B.attn.proj``
``L.mlp.fc1`` / ``fc2`` (SwiGLU: ``gate_proj``, ``up_proj``,   ``B.mlp.fc1`` / ``fc2`` (gate and
``down_proj``)                                                 up packed in ``fc1``)
``layernorm``                                                  ``backbone.norm``
``query.weight`` [Q, D]                                        ``query_embed.weight``
``upscale_block.block.N.{conv1,conv2,layernorm2d}``            ``decode_head.upscale.N.{up,conv,
                                                               norm}``
``mask_head.fc{1,2,3}``                                        ``decode_head.mask_embed.fc{1,2,3}``
``class_predictor`` [K+1, D]                                   ``decode_head.class_embed``
``attn_mask_probs`` [N]                                        ``attn_mask_probs``
=============================================================  =================================

Dropped: ``criterion.empty_weight``, the class weights of HF's loss (ones, then the no-object
weight), which densevit's criterion makes from its ``no_object_weight``. A file without
registers has an empty ``register_tokens`` [1, 0, D], dropped as well. HF adds the position
table to the patch tokens only, so the class token gets a zero row (an exact equivalent).

The densevit model these files fit: a ``VisionTransformer`` with the file's width, depth,
heads and patch size, ``img_size`` its ``image_size`` (HF's table is not resized: other
sizes are densevit's own extension, the table resized bicubically), ``with_cls_token=True``,
``num_register_tokens`` R, ``layer_scale_init_value`` set (any non-zero value), LayerNorm
eps 1e-6, ``ffn_type='swiglu'`` for ``use_swiglu_ffn``; ``EoMT(num_queries=Q,
num_blocks=N)`` and the head's ``num_classes`` K, ``num_upscale_blocks`` as the file has.
"""
import torch

from .dinov2 import layer_rules
from .layout import Layout, convert_state_dict, hf_attention_rules, prefixed_rules

_LAYER = r'layers\.(\d+)\.'
_POS = 'backbone.pos_embed.weight'
_REGISTERS = 'backbone.register_tokens'
_UPSCALE = {'conv1': 'up', 'conv2': 'conv', 'layernorm2d': 'norm'}


def _with_class_row(state_dict):
    """HF's [h*w, D] patch position table -> densevit's [1, 1 + h*w, D] with a zero class
    row; an empty register table (a model without registers) dropped."""
    table = state_dict.get(_POS)
    if table is not None and table.dim() == 2:
        state_dict[_POS] = torch.cat([table.new_zeros(1, table.shape[1]), table])[None]
    if _REGISTERS in state_dict and state_dict[_REGISTERS].numel() == 0:
        del state_dict[_REGISTERS]
    return state_dict


_BACKBONE = [
    (r'embeddings\.cls_token', 'cls_token'),
    (r'embeddings\.register_tokens', 'register_tokens'),
    (r'embeddings\.patch_embeddings\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
    (r'embeddings\.position_embeddings\.weight', 'pos_embed.weight'),
    (r'layernorm\.(weight|bias)', r'norm.\1'),
    *hf_attention_rules(_LAYER),
    (_LAYER + r'attention\.out_proj\.(weight|bias)', r'blocks.\1.attn.proj.\2'),
    *layer_rules(_LAYER),
]

HF = Layout(
    'Hugging Face EoMT', r'^mask_head\.fc1\.weight$',
    [
        *prefixed_rules(_BACKBONE, '', 'backbone.'),
        (r'query\.weight', 'query_embed.weight'),
        (r'upscale_block\.block\.(\d+)\.(conv1|conv2|layernorm2d)\.(weight|bias)',
         lambda m: f'decode_head.upscale.{m[1]}.{_UPSCALE[m[2]]}.{m[3]}'),
        (r'mask_head\.fc(1|2|3)\.(weight|bias)', r'decode_head.mask_embed.fc\1.\2'),
        (r'class_predictor\.(weight|bias)', r'decode_head.class_embed.\1'),
        (r'attn_mask_probs', 'attn_mask_probs'),
    ],
    drop={r'criterion\.empty_weight': "the class weights of HF's loss (ones and the "
                                      "no-object weight): densevit's criterion makes them "
                                      'from no_object_weight'},
    post=_with_class_row,
    options={'layer_norm_eps': 1e-6})


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    return [HF]


def convert_eomt(state_dict, strict=False):
    """Convert an HF EoMT checkpoint to densevit's keys (``strict``: as
    :func:`~densevit.checkpoint.layout.convert_state_dict`)."""
    return convert_state_dict(state_dict, [HF], 'EoMT', strict)
