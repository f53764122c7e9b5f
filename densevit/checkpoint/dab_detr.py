"""Hugging Face ``DabDetrForObjectDetection`` checkpoints -> densevit's ``DETR`` with a
:class:`~densevit.models.heads.dab_detr_head.DABDETRHead`.

Recognised by ``decoder.layers.N.self_attn.self_attn_query_content_proj`` (a name only
DAB-DETR uses). ``T`` below is ``bbox_head.transformer.``; ``(model.)`` is optional.
Tensors are copied unchanged, except the encoder's q / k / v projections, fused in
q-k-v order into ``in_proj_weight`` [3D, D] / ``in_proj_bias``:

- ``(model.)backbone.conv_encoder.model.*`` -> ``backbone.*`` (timm ResNet: torchvision's
  names; HF ``ResNet``: converted by :func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`)
- ``input_projection`` -> ``bbox_head.input_proj``; ``query_refpoint_embeddings`` [Q, 4]
  (anchors before the sigmoid) -> ``bbox_head.anchor_embed``
- encoder layer N (DETR's): ``self_attn.{q,k,v}_proj`` -> ``T.encoder.N.self_attn.in_proj_*``,
  ``self_attn.out_proj``, ``fc1`` / ``fc2`` -> ``ffn.linear1`` / ``linear2``,
  ``activation_fn.weight`` (the PReLU slope) -> ``ffn.activation.weight``,
  ``self_attn_layer_norm`` / ``final_layer_norm`` -> ``norm1`` / ``norm2``;
  ``encoder.query_scale`` -> ``T.encoder_query_scale``
- decoder layer N: ``self_attn.self_attn_{query,key}_{content,pos}_proj`` /
  ``self_attn_value_proj`` -> ``T.decoder.N.self_attn.{q,k}_{content,pos}`` / ``value``,
  ``self_attn.self_attn.output_proj`` -> ``self_attn.out_proj``,
  ``self_attn.self_attn_layer_norm`` -> ``norm1``; the same under ``cross_attn.cross_attn_*``
  -> ``cross_attn.*`` with ``cross_attn_query_pos_sine_proj`` -> ``cross_attn.q_spatial``
  (``query_pos`` in layer 0 only, unless ``keep_query_pos``) and
  ``cross_attn.cross_attn_layer_norm`` -> ``norm2``; ``mlp.fc1`` / ``mlp.fc2`` /
  ``mlp.activation_fn`` / ``mlp.final_layer_norm`` -> ``ffn.linear1`` / ``ffn.linear2`` /
  ``ffn.activation`` / ``norm3``
- ``decoder.layernorm`` -> ``T.decoder_norm``; ``decoder.{query_scale, ref_point_head,
  ref_anchor_head}`` -> ``T.*``
- ``class_embed`` [K, D] -> ``bbox_head.class_embed``; ``bbox_predictor.layers.N`` ->
  ``bbox_head.bbox_embed.layers.N``. HF ties ``model.decoder.bbox_embed`` (the anchor
  refinement) to ``bbox_predictor``: ``save_pretrained`` writes it once; where a state
  dict has both, the decoder's copy is dropped (densevit's head passes its one
  ``bbox_embed`` to the decoder, as the official code shares it).

Not in the keys, so assumed as HF builds them: the image encoding's temperature 20 for
both axes (``temperature_height`` = ``temperature_width``, densevit has one), no
``normalize_before``, no pattern embeddings (``num_patterns`` 0: a file with
``model.patterns`` is refused as not understood).
"""
from .detr import hf_variant_rules
from .layout import Layout, convert_state_dict, detector_layout
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'
_M = r'(?:model\.)?'
_DEC = _M + r'decoder\.layers\.(\d+)\.'
_PROJ = {'query_content': 'q_content', 'query_pos': 'q_pos', 'key_content': 'k_content',
         'key_pos': 'k_pos', 'value': 'value', 'query_pos_sine': 'q_spatial'}
_PROJ_NAMES = '|'.join(sorted(_PROJ, key=len, reverse=True))
_DEC_NORMS = {'self_attn.self_attn_layer_norm': 'norm1',
              'cross_attn.cross_attn_layer_norm': 'norm2', 'mlp.final_layer_norm': 'norm3'}

HF = Layout(
    'Hugging Face DAB-DETR', r'(^|\.)decoder\.layers\.\d+\.self_attn\.self_attn_query_content_proj\.',
    hf_variant_rules() + [
        (_M + r'query_refpoint_embeddings\.weight', 'bbox_head.anchor_embed.weight'),
        (_M + r'encoder\.layers\.(\d+)\.activation_fn\.weight',
         _T + r'encoder.\1.ffn.activation.weight'),
        (_M + r'encoder\.query_scale\.layers\.(\d)\.' + _LEAF,
         _T + r'encoder_query_scale.layers.\1.\2'),
        (_DEC + rf'(self_attn|cross_attn)\.\2_({_PROJ_NAMES})_proj\.' + _LEAF,
         lambda m: f'{_T}decoder.{m[1]}.{m[2]}.{_PROJ[m[3]]}.{m[4]}'),
        (_DEC + r'(self_attn|cross_attn)\.\2\.output_proj\.' + _LEAF,
         _T + r'decoder.\1.\2.out_proj.\3'),
        (_DEC + r'mlp\.fc(1|2)\.' + _LEAF, _T + r'decoder.\1.ffn.linear\2.\3'),
        (_DEC + r'mlp\.activation_fn\.weight', _T + r'decoder.\1.ffn.activation.weight'),
        (_DEC + r'(self_attn\.self_attn_layer_norm|cross_attn\.cross_attn_layer_norm|'
                r'mlp\.final_layer_norm)\.' + _LEAF,
         lambda m: f'{_T}decoder.{m[1]}.{_DEC_NORMS[m[2]]}.{m[3]}'),
        (_M + r'decoder\.(query_scale|ref_point_head|ref_anchor_head)\.layers\.(\d)\.' + _LEAF,
         _T + r'\1.layers.\2.\3'),
        (r'class_embed\.' + _LEAF, r'bbox_head.class_embed.\1'),
    ],
    drop={_M + r'decoder\.bbox_embed\..+': 'tied to bbox_predictor (one box predictor)'},
    post=convert_hf_resnet_backbone)

DENSEVIT = detector_layout('densevit DAB-DETR', r'^bbox_head\.anchor_embed\.weight$')


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    return [HF]


def convert_dab_detr(state_dict, strict=False):
    """Convert an HF DAB-DETR checkpoint (or a densevit one) to densevit's keys
    (``strict``: as :func:`~densevit.checkpoint.layout.convert_state_dict`)."""
    return convert_state_dict(state_dict, [HF, DENSEVIT], 'DAB-DETR', strict)
