"""Hugging Face DINOv3 checkpoints (Simeoni et al. 2025, the ViTs) -> densevit's
:class:`~densevit.models.backbones.vit.VisionTransformer`.

``DINOv3ViTModel`` and ``DINOv3ViTBackbone`` (the same keys), in the Hub file layout (what
``save_pretrained`` writes: ``layer.N.*``) and in transformers 5's module layout
(``model.layer.N.*``):

=====================================================  =====================================
Hugging Face                                           densevit
=====================================================  =====================================
``embeddings.cls_token`` [1, 1, D]                     ``cls_token``
``embeddings.register_tokens`` [1, R, D]               ``register_tokens`` (none when R = 0)
``embeddings.patch_embeddings`` (a Conv2d)             ``patch_embed.proj``
``layer.N.norm1`` / ``norm2``                          ``blocks.N.norm1`` / ``norm2``
``layer.N.attention.{q,k,v}_proj``                     ``blocks.N.attn.qkv`` (fused q-k-v)
``...{q,v}_proj.bias``, no ``k_proj.bias``             ``blocks.N.attn.q_bias``, ``v_bias``
``layer.N.attention.o_proj``                           ``blocks.N.attn.proj``
``layer.N.layer_scale1.lambda1`` / ``layer_scale2``    ``blocks.N.ls1.gamma`` / ``ls2.gamma``
``layer.N.mlp.up_proj`` / ``down_proj``                ``blocks.N.mlp.fc1`` / ``fc2``
``layer.N.mlp.{gate,up}_proj`` (gated MLP)             ``blocks.N.mlp.fc1`` (gate, then up)
``norm``                                               ``norm``
=====================================================  =====================================

Dropped: ``embeddings.mask_token`` (the masked-image-modelling token of pre-training) and
``rope_embeddings.inv_freq`` where a file has it (RoPE's frequencies, computed from the
config). There is no position table: the position is RoPE's alone.

The densevit ViT these files fit (the file's ``config.json`` on the left):

- ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``:
  ``arch=dict(embed_dims, num_layers, num_heads, feedforward_channels)``; ``patch_size``;
  ``num_register_tokens`` (4 in the released models);
- ``pos_embed=dict(type='rope', convention='dinov3')`` (theta 100 = ``rope_theta``; HF's
  training-time ``pos_embed_shift`` / ``jitter`` / ``rescale`` are the RoPE's ``shift`` /
  ``jitter`` / ``rescale``, drawn in training mode only), ``crop_to_patch=True`` for sizes
  that are not multiples of the patch (HF's convolution drops the remainder, and its RoPE
  grid is ``(H // P, W // P)``);
- ``qkv_bias=(query_bias, key_bias, value_bias)``: ``(True, False, True)`` in the released
  models (an absent key bias is zero, not learned);
- ``layer_scale_init_value`` set (any non-zero value: the file brings its ``lambda1``);
- ``use_gated_mlp``: ``ffn_type='swiglu'`` (``hidden_act='silu'``, the released ViT-S+ /
  H+ / 7B) or ``'geglu'`` (``'gelu'``), with ``glu_hidden='full'`` (``intermediate_size``
  is the gated layer's width); otherwise ``ffn_type='mlp'`` (GELU);
- ``layer_norm_eps=1e-5`` (the origin option recorded);
- ``DINOv3ViTBackbone``: stage ``i`` is the output of layer ``i - 1``
  (``out_indices`` one less), normalised by the final ``norm`` when ``apply_layernorm``
  (``norm_every_output=True``); the class and register tokens dropped, the patches
  reshaped to [B, D, H // P, W // P]. (Its ``stem`` stage, the embeddings, has no
  densevit counterpart.)

Not represented: ``proj_bias=False`` and ``mlp_bias=False`` (no released model has them:
their files lack those biases, which then show as missing).
"""
from . import dinov2
from .layout import Layout, hf_attention_rules, hf_vit_drop

_LAYER = r'(?:model\.)?layer\.(\d+)\.'
_RULES = [
    (r'embeddings\.cls_token', 'cls_token'),
    (r'embeddings\.register_tokens', 'register_tokens'),
    (r'embeddings\.patch_embeddings\.(weight|bias)', r'patch_embed.proj.\1'),
    (r'norm\.(weight|bias)', r'norm.\1'),
    *hf_attention_rules(_LAYER),
    *dinov2.layer_rules(_LAYER),
]
_DROP = {**hf_vit_drop(''),
         r'rope_embeddings\..*': "RoPE's frequencies (computed from the config, not weights)"}
_OPTIONS = {'layer_norm_eps': 1e-5}


def _drop_empty_registers(state_dict):
    """HF keeps ``register_tokens`` [1, 0, D] in a model without registers."""
    tokens = state_dict.get('register_tokens')
    if tokens is not None and tokens.shape[1] == 0:
        del state_dict['register_tokens']
    return state_dict


HF_DINOV3_GATED = Layout(
    'Hugging Face DINOv3 (gated MLP)', r'^(?:model\.)?layer\.\d+\.mlp\.gate_proj\.weight$',
    _RULES, drop=_DROP, post=_drop_empty_registers, options=_OPTIONS)
# the plain MLP's up_proj is its first layer, not the second half of a gated one
HF_DINOV3 = Layout(
    'Hugging Face DINOv3', r'^(?:model\.)?layer\.\d+\.layer_scale1\.lambda1$',
    [(_LAYER + r'mlp\.up_proj\.(weight|bias)', r'blocks.\1.mlp.fc1.\2'), *_RULES],
    drop=_DROP, post=_drop_empty_registers, options=_OPTIONS)

# a gated file matches both signatures and both rename every key: the gated one first wins
LAYOUTS = (HF_DINOV3_GATED, HF_DINOV3)
