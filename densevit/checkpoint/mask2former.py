"""Hugging Face ``Mask2FormerForUniversalSegmentation`` checkpoints (Mask2Former, Cheng et al.
2022) on a ``SwinBackbone`` -> densevit's :class:`~densevit.models.segmentors.mask2former.
Mask2Former` with a ``SwinTransformer``, ``MSDeformAttnPixelDecoder`` and ``Mask2FormerHead``.

The file ``save_pretrained`` writes (``model.safetensors``) or the module's state dict, with
``P.`` = ``model.pixel_level_module.decoder.``, ``E.`` = ``P.encoder.layers.N.``, ``T.`` =
``model.transformer_module.``, ``L.`` = ``T.decoder.layers.N.`` (densevit: ``pixel_decoder.``,
``pixel_decoder.encoder.N.``, ``decode_head.``, ``decode_head.layers.N.``):

=========================================================  ====================================
Hugging Face                                               densevit
=========================================================  ====================================
``model.pixel_level_module.encoder.*`` (``SwinBackbone``)  ``backbone.*``: ``swin.py``'s HF
                                                           ``SwinBackbone`` layout
``P.input_projections.I.{0,1}`` (conv, GroupNorm)          ``pixel_decoder.input_proj.I.
                                                           {conv,gn}`` (coarsest first, both)
``P.level_embed``                                          ``pixel_decoder.level_embed``
``E.self_attn.*`` (sampling offsets, weights, value and    ``pixel_decoder.encoder.N.
output projections)                                        self_attn.*``
``E.self_attn_layer_norm``, ``E.final_layer_norm``         ``...encoder.N.norm1``, ``norm2``
``E.fc1``, ``E.fc2``                                       ``...encoder.N.ffn.linear1``,
                                                           ``linear2``
``P.adapter_K.{0,1}``, ``P.layer_K.{0,1}`` (FPN)           ``pixel_decoder.lateral_convs.
                                                           (K-1).{conv,gn}``, ``output_convs.
                                                           (K-1).{conv,gn}``
``P.mask_projection``                                      ``pixel_decoder.mask_feature``
``T.queries_features``, ``T.queries_embedder``             ``decode_head.query_feat``,
                                                           ``query_embed``
``T.level_embed.weight``, ``T.input_projections.I``        ``decode_head.level_embed``,
                                                           ``input_proj.I``
``L.cross_attn.*`` (``nn.MultiheadAttention``)             ``decode_head.layers.N.cross_attn.*``
``L.self_attn.{q,k,v}_proj``, ``out_proj``                 ``...self_attn.in_proj_*`` (fused
                                                           q-k-v), ``out_proj``
``L.cross_attn_layer_norm``, ``self_attn_layer_norm``,     ``...norm2``, ``norm1``, ``norm3``
``final_layer_norm``                                       (DETR's layer: ``norm1`` after
                                                           self-attention)
``L.fc1``, ``L.fc2``                                       ``...ffn.linear1``, ``linear2``
``T.decoder.layernorm``                                    ``decode_head.decoder_norm``
``T.decoder.mask_predictor.mask_embedder.J.0``             ``decode_head.mask_embed.layers.J``
``class_predictor``                                        ``decode_head.class_embed``
=========================================================  ====================================

``T.input_projections.I`` (1x1 convs, ``feature_size`` to ``hidden_dim``): transformers 5.17
and earlier keep them in a plain list, never saved (HF cannot load such a file back either);
5.24 saves them. A file of a projecting model without them is refused, naming the cause. Where
``feature_size`` is ``hidden_dim`` (the Hub's files) there are none, in every version's files.

Dropped: ``criterion.empty_weight`` (HF's class weights of the loss: densevit's criterion makes
them from ``no_object_weight``) and the final norm of the ``SwinModel`` inside HF's
``SwinBackbone``, which it never applies. Origin option ``always_shift=True`` (HF's
``SwinBackbone``). The densevit model these files fit: ``SwinTransformer`` of the file's
``embed_dim``, ``depths``, ``num_heads``, ``window_size``, ``patch_size``, ``mlp_ratio``,
``out_indices=(0, 1, 2, 3)``; ``MSDeformAttnPixelDecoder(feat_channels=feature_size,
out_channels=mask_feature_size, num_encoder_layers=encoder_layers, num_heads=
num_attention_heads, feedforward_channels=encoder_feedforward_dim)`` (3 levels, 4 points, HF's
fixed values); ``Mask2FormerHead(num_queries, embed_dims=hidden_dim, num_layers=
decoder_layers - 1, num_heads=num_attention_heads, feedforward_channels=dim_feedforward,
enforce_input_proj)`` -- HF's ``decoder_layers`` counts the prediction before the first layer;
post-norm layers (``pre_norm=False``, HF's default; ``pre_norm=True`` files are not
supported) with ReLU FFNs. HF's ``common_stride`` 4 and ``feature_strides`` are the backbone's
strides 4, 8, 16, 32 here (the FPN step runs on every map finer than the encoder's three).
Proof: ``tests/models/test_mask2former_vs_hf.py``. Other HF backbones (ResNet, ...) are not
recognised.
"""
from .layout import Layout, convert_state_dict, prefixed_rules
from .swin import HF_BACKBONE as HF_SWIN
from .swin import HF_IN_MODEL_DROP as HF_SWIN_DROP
from .swin import HF_IN_MODEL_RULES as HF_SWIN_RULES

_B = r'model\.pixel_level_module\.encoder\.'
_P = r'model\.pixel_level_module\.decoder\.'
_E = _P + r'encoder\.layers\.(\d+)\.'
_T = r'model\.transformer_module\.'
_L = _T + r'decoder\.layers\.(\d+)\.'
_WB = r'(weight|bias)'
_CONV_GN = {'0': 'conv', '1': 'gn'}
_ENCODER = {'self_attn_layer_norm': 'norm1', 'final_layer_norm': 'norm2', 'fc1': 'ffn.linear1',
            'fc2': 'ffn.linear2'}
_DECODER = {'cross_attn_layer_norm': 'norm2', 'self_attn_layer_norm': 'norm1',
            'final_layer_norm': 'norm3', 'fc1': 'ffn.linear1', 'fc2': 'ffn.linear2'}
_QKV = {'q_proj': 'q', 'k_proj': 'k', 'v_proj': 'v'}

_PIXEL_DECODER = [
    (_P + r'level_embed', 'pixel_decoder.level_embed'),
    (_P + r'input_projections\.(\d+)\.([01])\.' + _WB,
     lambda m: f'pixel_decoder.input_proj.{m[1]}.{_CONV_GN[m[2]]}.{m[3]}'),
    (_E + r'self_attn\.(\w+)\.' + _WB, r'pixel_decoder.encoder.\1.self_attn.\2.\3'),
    (_E + r'(self_attn_layer_norm|final_layer_norm|fc1|fc2)\.' + _WB,
     lambda m: f'pixel_decoder.encoder.{m[1]}.{_ENCODER[m[2]]}.{m[3]}'),
    (_P + r'(adapter|layer)_(\d+)\.([01])\.' + _WB,
     lambda m: (f"pixel_decoder.{'lateral' if m[1] == 'adapter' else 'output'}_convs."
                f'{int(m[2]) - 1}.{_CONV_GN[m[3]]}.{m[4]}')),
    (_P + r'mask_projection\.' + _WB, r'pixel_decoder.mask_feature.\1'),
]

_TRANSFORMER_DECODER = [
    (_T + r'queries_features\.weight', 'decode_head.query_feat.weight'),
    (_T + r'queries_embedder\.weight', 'decode_head.query_embed.weight'),
    (_T + r'level_embed\.weight', 'decode_head.level_embed'),
    (_T + r'input_projections\.(\d+)\.' + _WB, r'decode_head.input_proj.\1.\2'),
    (_L + r'cross_attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)',
     r'decode_head.layers.\1.cross_attn.\2'),
    (_L + r'self_attn\.(q_proj|k_proj|v_proj)\.' + _WB,
     lambda m: f'decode_head.layers.{m[1]}.self_attn.in_proj_{m[3]}@{_QKV[m[2]]}'),
    (_L + r'self_attn\.out_proj\.' + _WB, r'decode_head.layers.\1.self_attn.out_proj.\2'),
    (_L + r'(cross_attn_layer_norm|self_attn_layer_norm|final_layer_norm|fc1|fc2)\.' + _WB,
     lambda m: f'decode_head.layers.{m[1]}.{_DECODER[m[2]]}.{m[3]}'),
    (_T + r'decoder\.layernorm\.' + _WB, r'decode_head.decoder_norm.\1'),
    (_T + r'decoder\.mask_predictor\.mask_embedder\.(\d+)\.0\.' + _WB,
     r'decode_head.mask_embed.layers.\1.\2'),
    (r'class_predictor\.' + _WB, r'decode_head.class_embed.\1'),
]


def _check_input_proj(state_dict):
    """Refuse a file whose decoder projects its memory (``feature_size`` != ``hidden_dim``) but
    that holds no input projections (transformers <= 5.17 never saved them)."""
    memory, queries = (state_dict.get(k) for k in ('pixel_decoder.level_embed',
                                                   'decode_head.level_embed'))
    if (memory is not None and queries is not None and memory.shape[1] != queries.shape[1]
            and not any(k.startswith('decode_head.input_proj.') for k in state_dict)):
        raise ValueError(
            f'Mask2Former: the decoder projects the {memory.shape[1]}-wide memory to '
            f'{queries.shape[1]} channels, but the file has no '
            'model.transformer_module.input_projections.*: transformers up to 5.17 keeps them '
            'in a plain list, which it never saves (5.24 saves them), so the file cannot give '
            'the model it was saved from')
    return state_dict


HF_MASK2FORMER_SWIN = Layout(
    'Hugging Face Mask2Former (Swin)',
    r'^model\.transformer_module\.decoder\.mask_predictor\.mask_embedder\.0\.0\.weight$',
    prefixed_rules(HF_SWIN_RULES, _B, 'backbone.') + _PIXEL_DECODER + _TRANSFORMER_DECODER,
    drop={r'criterion\.empty_weight': "the class weights of HF's loss (ones and the no-object "
                                      "weight): densevit's criterion makes them from "
                                      'no_object_weight',
          **{_B + pattern: reason for pattern, reason in HF_SWIN_DROP.items()}},
    post=_check_input_proj, options=dict(HF_SWIN.options))


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    return [HF_MASK2FORMER_SWIN]


def convert_mask2former(state_dict, strict=False):
    """Convert an HF Mask2Former (Swin) checkpoint to densevit's keys (``strict``: as
    :func:`~densevit.checkpoint.layout.convert_state_dict`)."""
    return convert_state_dict(state_dict, [HF_MASK2FORMER_SWIN], 'Mask2Former', strict)


def hf_model_cfg(config):
    """densevit's ``Mask2Former`` config for a Hugging Face ``Mask2FormerConfig`` on a Swin
    backbone: the model whose state dict :func:`convert_mask2former` makes of that config's
    files (HF counts its decoder layers with the prediction before the first one: one more)."""
    s, c = config.backbone_config, config
    return dict(
        type='Mask2Former',
        backbone=dict(type='SwinTransformer',
                      arch=dict(embed_dims=s.embed_dim, depths=s.depths, num_heads=s.num_heads),
                      patch_size=s.patch_size, window_size=s.window_size, mlp_ratio=s.mlp_ratio,
                      drop_path_rate=0.0, out_indices=(0, 1, 2, 3), always_shift=True),
        pixel_decoder=dict(type='MSDeformAttnPixelDecoder', feat_channels=c.feature_size,
                           out_channels=c.mask_feature_size, num_encoder_layers=c.encoder_layers,
                           num_heads=c.num_attention_heads,
                           feedforward_channels=c.encoder_feedforward_dim),
        decode_head=dict(type='Mask2FormerHead', num_classes=c.num_labels,
                         num_queries=c.num_queries, embed_dims=c.hidden_dim,
                         num_layers=c.decoder_layers - 1, num_heads=c.num_attention_heads,
                         feedforward_channels=c.dim_feedforward,
                         criterion=dict(type='MaskSetCriterion', num_points=c.train_num_points,
                                        oversample_ratio=c.oversample_ratio,
                                        importance_sample_ratio=c.importance_sample_ratio,
                                        no_object_weight=c.no_object_weight)))
