"""Hugging Face Segment Anything checkpoints (Kirillov et al. 2023), their image encoder ->
densevit's :class:`~densevit.models.backbones.vit.VisionTransformer` with windowed attention.

``SamVisionModel`` (the encoder alone) and ``SamModel`` (with the prompt encoder and mask
decoder), as ``save_pretrained`` writes them; the encoder's keys are under
``vision_encoder.``:

=====================================================  =====================================
Hugging Face                                           densevit
=====================================================  =====================================
``pos_embed`` [1, h, w, D] (added channels-last)       ``pos_embed.weight`` [1, h*w, D]
``patch_embed.projection``                             ``patch_embed.proj``
``layers.N.layer_norm1`` / ``layer_norm2``             ``blocks.N.norm1`` / ``norm2``
``layers.N.attn.qkv`` / ``proj``                       ``blocks.N.attn.qkv`` / ``proj``
``layers.N.attn.rel_pos_h`` / ``rel_pos_w``            ``blocks.N.attn.rel_pos_h`` / ``_w``
``layers.N.mlp.lin1`` / ``lin2``                       ``blocks.N.mlp.fc1`` / ``fc2``
=====================================================  =====================================

The table [1, h, w, D] is the same numbers as densevit's row-major [1, h*w, D]: reshaped.

Dropped, with an INFO line each: the encoder's ``neck`` (conv 1x1 to ``output_channels``,
channel LayerNorm, conv 3x3, channel LayerNorm: it is not part of the ViT; densevit's
:class:`~densevit.models.necks.SimpleFeaturePyramid` with ``scale_factors=(1.0,)`` and its
default ``LN2d`` norm has the same four layers, but a backbone's ``init_cfg`` loads the
backbone alone), and ``SamModel``'s prompt encoder, mask decoder and shared image embedding.

The densevit ViT these files fit (the file's vision ``config.json`` on the left):
``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``mlp_dim``:
``arch=dict(embed_dims, num_layers, num_heads, feedforward_channels)``; ``patch_size``;
``image_size``: ``img_size`` (SAM accepts only that size; densevit's ViT takes others, its
table and global tables resized); ``window_size``; ``global_attn_indexes``;
``use_rel_pos``: ``decomposed_rel_pos``; ``use_abs_pos=False``: ``pos_embed=None``;
``with_cls_token=False``, ``final_norm=False``; ``layer_norm_eps`` (1e-6). densevit's output
map is SAM's last layer's output before the neck ([B, D, h, w]).
"""
from .layout import Layout
from .vitdet import attention_rules

_ENCODER = r'vision_encoder\.'
_LAYER = _ENCODER + r'layers\.(\d+)\.'
_RULES = [
    (_ENCODER + r'pos_embed', 'pos_embed.weight'),
    (_ENCODER + r'patch_embed\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
    (_LAYER + r'layer_norm(1|2)\.(weight|bias)', r'blocks.\1.norm\2.\3'),
    *attention_rules(_LAYER, 'attn'),
    (_LAYER + r'mlp\.lin(1|2)\.(weight|bias)', r'blocks.\1.mlp.fc\2.\3'),
]
_DROP = {
    _ENCODER + r'neck\..*': "SAM's neck (conv 1x1, LayerNorm2d, conv 3x3, LayerNorm2d), not "
                            "part of the ViT (SimpleFeaturePyramid with scale_factors=(1.0,) "
                            "has the same layers)",
    r'(prompt_encoder|mask_decoder|shared_image_embedding)\..*':
        "SAM's prompt encoder and mask decoder (not part of the image encoder)",
}


def _flatten_table(state_dict):
    """SAM's table [1, h, w, D] -> [1, h*w, D] (row-major: the same order)."""
    table = state_dict.get('pos_embed.weight')
    if table is not None and table.dim() == 4:
        state_dict['pos_embed.weight'] = table.flatten(1, 2)
    return state_dict


HF_SAM = Layout("Hugging Face SAM (its image encoder)",
                r'^vision_encoder\.layers\.\d+\.attn\.qkv\.weight$', _RULES, drop=_DROP,
                post=_flatten_table, options={'layer_norm_eps': 1e-6})

LAYOUTS = (HF_SAM,)
