"""Hugging Face DINOv2 checkpoints (Oquab et al. 2024; with registers, Darcet et al. 2024)
-> densevit's :class:`~densevit.models.backbones.vit.VisionTransformer`.

``Dinov2Model``, ``Dinov2Backbone`` (the same keys), ``Dinov2ForImageClassification``
(under ``dinov2.``) and their ``Dinov2WithRegisters*`` counterparts (under
``dinov2_with_registers.``), in the Hub file layout (what ``save_pretrained`` writes) and
in transformers 5's module layout:

========================================================  ==================================
Hugging Face                                              densevit
========================================================  ==================================
``embeddings.cls_token`` [1, 1, D]                        ``cls_token``
``embeddings.register_tokens`` [1, R, D]                  ``register_tokens``
``embeddings.position_embeddings`` [1, 1 + h*w, D]        ``pos_embed.weight``
``embeddings.patch_embeddings.projection``                ``patch_embed.proj``
``encoder.layer.N.norm1`` / ``norm2``                     ``blocks.N.norm1`` / ``norm2``
``...attention.attention.{query,key,value}``              ``blocks.N.attn.qkv`` (fused q-k-v)
  (module: ``attention.{q,k,v}_proj``)
``...attention.output.dense`` (module: ``o_proj``)        ``blocks.N.attn.proj``
``...layer_scale1.lambda1`` / ``layer_scale2.lambda1``    ``blocks.N.ls1.gamma`` / ``ls2.gamma``
``...mlp.fc1`` / ``fc2``                                  ``blocks.N.mlp.fc1`` / ``fc2``
``...mlp.weights_in`` [2H, D] (SwiGLU: gate, then up)     ``blocks.N.mlp.fc1``
  (module: ``mlp.gate_proj``, ``up_proj``)                  (fused: gate, then up)
``...mlp.weights_out`` (module: ``down_proj``)            ``blocks.N.mlp.fc2``
``layernorm``                                             ``norm``
========================================================  ==================================

Dropped: ``embeddings.mask_token`` (the masked-image-modelling token of pre-training) and a
classifier's ``classifier``. The densevit ViT that these files fit: ``patch_size`` and
``img_size`` of the file's config (its table: ``image_size / patch_size`` a side),
``layer_scale_init_value`` set (any non-zero value: the file brings its ``lambda1``),
``ffn_type='swiglu'`` where the file has ``use_swiglu_ffn`` (its ``feedforward_channels``
``hidden_size * mlp_ratio``), ``num_register_tokens``, LayerNorm eps 1e-6 (the origin
option recorded), ``norm_every_output=True`` for ``Dinov2Backbone``'s normalised
intermediate maps. Hugging Face resizes the table bicubically to ``(H // P, W // P)``:
with ``antialias=True`` in the registers model, so its origin option is
``interpolate_mode='bicubic_antialias'``; without registers ``'bicubic'``.
"""
from .layout import Layout, hf_vit_drop, hf_vit_rules

_PREFIX = r'(?:dinov2(?:_with_registers)?\.)?'


def layer_rules(layer):
    """A DINOv2-style layer under ``layer`` (a regex ending in ``.``, its one group the
    layer index), beside its attention: the two norms, LayerScale, and the MLP or SwiGLU
    (Hub names ``fc1`` / ``weights_in``, module names ``gate_proj`` / ``up_proj``, gate
    first when fused; ``fc2`` / ``weights_out`` / ``down_proj``). DINOv3's layers too."""
    return [
        (layer + r'norm(1|2)\.(weight|bias)', r'blocks.\1.norm\2.\3'),
        (layer + r'layer_scale(1|2)\.lambda1', r'blocks.\1.ls\2.gamma'),
        (layer + r'mlp\.(?:fc1|weights_in)\.(weight|bias)', r'blocks.\1.mlp.fc1.\2'),
        (layer + r'mlp\.(gate|up)_proj\.(weight|bias)', r'blocks.\1.mlp.fc1.\3@\2'),
        (layer + r'mlp\.(?:fc2|weights_out|down_proj)\.(weight|bias)', r'blocks.\1.mlp.fc2.\2'),
    ]


_RULES = [*hf_vit_rules(_PREFIX), *layer_rules(_PREFIX + r'encoder\.layer\.(\d+)\.')]
_DROP = hf_vit_drop(_PREFIX)
_SIGNATURE = r'(^|\.)encoder\.layer\.\d+\.(norm1|layer_scale1)\.'

HF_DINOV2 = Layout('Hugging Face DINOv2', _SIGNATURE, _RULES, drop=_DROP,
                   options={'layer_norm_eps': 1e-6, 'interpolate_mode': 'bicubic'})
# the registers' rule only here: a file with registers is left one key short by HF_DINOV2
HF_DINOV2_REGISTERS = Layout(
    'Hugging Face DINOv2 with registers', r'(^|\.)embeddings\.register_tokens$',
    [(_PREFIX + r'embeddings\.register_tokens', 'register_tokens'), *_RULES], drop=_DROP,
    options={'layer_norm_eps': 1e-6, 'interpolate_mode': 'bicubic_antialias'})

LAYOUTS = (HF_DINOV2_REGISTERS, HF_DINOV2)
