"""Hugging Face CLIP image towers (Radford et al. 2021) -> densevit's
:class:`~densevit.models.backbones.vit.VisionTransformer`.

``CLIPVisionModel`` (its keys under ``vision_model.`` in Hub files, without the prefix in
transformers 5's module layout), ``CLIPVisionModelWithProjection``,
``CLIPForImageClassification`` and a whole ``CLIPModel``, whose text tower is dropped
(one INFO line):

=====================================================  =========================================
Hugging Face (``vision_model.``)                       densevit
=====================================================  =========================================
``embeddings.class_embedding`` [D]                     ``cls_token`` [1, 1, D]
``embeddings.position_embedding.weight`` [1 + h*w, D]  ``pos_embed.weight`` [1, 1 + h*w, D]
``embeddings.patch_embedding.weight`` (no bias)        ``patch_embed.proj.weight`` (bias 0 added)
``pre_layrnorm``                                       ``pre_norm``
``encoder.layers.N.layer_norm1`` / ``layer_norm2``     ``blocks.N.norm1`` / ``norm2``
``...self_attn.{q,k,v}_proj``                          ``blocks.N.attn.qkv`` (fused q-k-v)
``...self_attn.out_proj``                              ``blocks.N.attn.proj``
``...mlp.fc1`` / ``fc2``                               ``blocks.N.mlp.fc1`` / ``fc2``
=====================================================  =========================================

Dropped, with a logged reason: ``post_layernorm`` (CLIP normalises the pooled class token
only, never the patch tokens: ``last_hidden_state`` is the last layer's output as it is),
``visual_projection`` (into the image-text space), a classifier's ``classifier``, the text
tower (``text_model.*``, ``text_projection``, ``logit_scale``) and stored ``position_ids``.

The densevit ViT these files fit (the file's ``vision_config`` on the left):
``arch=dict(embed_dims=hidden_size, num_layers=num_hidden_layers,
num_heads=num_attention_heads, feedforward_channels=intermediate_size)``, ``patch_size``,
``img_size=image_size``, ``pre_norm=True``, ``final_norm=False``,
``act_cfg=dict(type='QuickGELU')`` for ``hidden_act='quick_gelu'`` (OpenAI's models; None
for ``'gelu'``), ``layer_norm_eps=1e-5`` and ``interpolate_mode='bicubic'`` (the origin
options recorded: HF's ``interpolate_pos_encoding=True`` resizes the table bicubically to
``(H // P, W // P)``; without it HF takes only its config's size). The zero patch bias is
learned in fine-tuning, where CLIP's convolution has none.
"""
from .layout import Layout

_PREFIX = r'(?:vision_model\.)?'
_LAYER = _PREFIX + r'encoder\.layers\.(\d+)\.'
_RULES = [
    (_PREFIX + r'embeddings\.class_embedding', 'cls_token'),
    (_PREFIX + r'embeddings\.position_embedding\.weight', 'pos_embed.weight'),
    (_PREFIX + r'embeddings\.patch_embedding\.weight', 'patch_embed.proj.weight'),
    (_PREFIX + r'pre_layrnorm\.(weight|bias)', r'pre_norm.\1'),
    (_LAYER + r'layer_norm(1|2)\.(weight|bias)', r'blocks.\1.norm\2.\3'),
    (_LAYER + r'self_attn\.(q|k|v)_proj\.(weight|bias)', r'blocks.\1.attn.qkv.\3@\2'),
    (_LAYER + r'self_attn\.out_proj\.(weight|bias)', r'blocks.\1.attn.proj.\2'),
    (_LAYER + r'mlp\.(fc1|fc2)\.(weight|bias)', r'blocks.\1.mlp.\2.\3'),
]
_DROP = {
    _PREFIX + r'post_layernorm\..*': "norm of CLIP's pooled class token (the patch tokens "
                                     "never pass it)",
    r'visual_projection\..*': 'projection of the pooled image feature into the image-text '
                              'space (not part of a backbone)',
    r'classifier\..*': 'classification head (not part of a backbone)',
    r'text_model\..*|text_projection\..*|logit_scale': "CLIP's text tower (a backbone takes "
                                                        "the image tower only)",
    _PREFIX + r'embeddings\.position_ids': 'position index buffer (not a weight)',
}


def _as_vit(state_dict):
    """CLIP's class embedding [D] and position table [1 + h*w, D] in the ViT's shapes
    ([1, 1, D], [1, 1 + h*w, D]), and a zero patch bias."""
    from .vit import add_patch_bias  # (vit.py lists this module's layouts: imported late)
    for key in ('cls_token', 'pos_embed.weight'):
        if key in state_dict:
            tensor = state_dict[key]
            state_dict[key] = tensor.reshape(1, -1, tensor.shape[-1])
    return add_patch_bias(state_dict)


HF_CLIP = Layout('Hugging Face CLIP (image tower)',
                 r'^(vision_model\.)?(embeddings\.class_embedding|pre_layrnorm\.weight)$',
                 _RULES, drop=_DROP, post=_as_vit,
                 options={'layer_norm_eps': 1e-5, 'interpolate_mode': 'bicubic'})

LAYOUTS = (HF_CLIP,)
