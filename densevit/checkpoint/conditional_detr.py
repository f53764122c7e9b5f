"""Hugging Face ``ConditionalDetrForObjectDetection`` checkpoints -> densevit's ``DETR`` with
a :class:`~densevit.models.heads.conditional_detr_head.ConditionalDETRHead`.

Two key layouts, both recognised by names only Conditional DETR uses (``T`` below is
``bbox_head.transformer.``; ``(model.)`` is optional):

- the Hub file layout (what ``save_pretrained`` writes, e.g.
  ``microsoft/conditional-detr-resnet-50``): decoder ``sa_{qcontent,qpos,kcontent,kpos,v}_proj``,
  ``self_attn.out_proj``, ``ca_{qcontent,qpos,kcontent,kpos,v,qpos_sine}_proj``,
  ``encoder_attn.out_proj``, ``fc1`` / ``fc2``;
- the transformers-5 module layout (``model.state_dict()``): decoder
  ``self_attn.{q_content,q_pos,k_content,k_pos,v}_proj`` / ``o_proj``,
  ``encoder_attn.{q_content,q_pos,k_content,k_pos,v,q_pos_sine}_proj`` / ``o_proj``,
  ``mlp.fc1`` / ``mlp.fc2``.

Renaming (tensors copied unchanged, except the encoder's q / k / v projections, fused
in q-k-v order into ``in_proj_weight`` [3D, D] / ``in_proj_bias``):

- ``(model.)backbone.(conv_encoder.)model.*`` -> ``backbone.*`` (a timm ResNet keeps
  torchvision's names; an HF ``ResNet`` is converted by
  :func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`)
- ``input_projection`` -> ``bbox_head.input_proj``; ``query_position_embeddings`` [Q, D]
  -> ``bbox_head.query_embed``
- encoder layer N: ``self_attn.{q,k,v}_proj`` -> ``T.encoder.N.self_attn.in_proj_*``,
  ``self_attn.{out_proj,o_proj}`` -> ``self_attn.out_proj``, ``fc1`` / ``fc2`` ->
  ``ffn.linear1`` / ``linear2``, ``self_attn_layer_norm`` / ``final_layer_norm`` ->
  ``norm1`` / ``norm2`` (DETR's encoder layer)
- decoder layer N: self-attention ``q_content``, ``q_pos``, ``k_content``, ``k_pos``,
  ``v`` -> ``T.decoder.N.self_attn.{q_content, q_pos, k_content, k_pos, value}``, its
  output -> ``self_attn.out_proj``; cross-attention the same names under ``cross_attn``
  plus ``qpos_sine`` / ``q_pos_sine`` -> ``cross_attn.q_spatial`` (``q_pos`` exists in
  layer 0 only); ``self_attn_layer_norm`` / ``encoder_attn_layer_norm`` /
  ``final_layer_norm`` -> ``norm1`` / ``norm2`` / ``norm3``
- ``decoder.layernorm`` -> ``T.decoder_norm``; ``decoder.query_scale`` /
  ``decoder.ref_point_head`` (2-layer MLPs) -> ``T.query_scale`` / ``T.ref_point_head``
- ``class_labels_classifier`` [K, D] -> ``bbox_head.class_embed``;
  ``bbox_predictor.layers.N`` -> ``bbox_head.bbox_embed.layers.N``

Not in the keys, so assumed as HF builds them: the sine position encoding with
temperature 10000 and D / 2 features per axis, ReLU FFNs, post-norm layers. The class
count follows the checkpoint (``microsoft/conditional-detr-resnet-50``: 91 COCO ids).
"""
from .detr import hf_variant_rules
from .layout import Layout, convert_state_dict, detector_layout
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'
_M = r'(?:model\.)?'
_DEC = _M + r'decoder\.layers\.(\d+)\.'
# Hub-file and module-layout spellings of one projection -> ours
_PROJ = {'qcontent': 'q_content', 'q_content': 'q_content', 'qpos': 'q_pos', 'q_pos': 'q_pos',
         'kcontent': 'k_content', 'k_content': 'k_content', 'kpos': 'k_pos', 'k_pos': 'k_pos',
         'v': 'value', 'qpos_sine': 'q_spatial', 'q_pos_sine': 'q_spatial'}
_PROJ_NAMES = '|'.join(sorted(_PROJ, key=len, reverse=True))
_ATTN = {'sa': 'self_attn', 'self_attn': 'self_attn', 'ca': 'cross_attn',
         'encoder_attn': 'cross_attn'}
_NORMS = {'self_attn_layer_norm': 'norm1', 'encoder_attn_layer_norm': 'norm2',
          'final_layer_norm': 'norm3'}


def _decoder_proj(m):
    return f'{_T}decoder.{m[1]}.{_ATTN[m[2]]}.{_PROJ[m[3]]}.{m[4]}'


HF = Layout(
    'Hugging Face Conditional DETR',
    r'(^|\.)decoder\.layers\.\d+\.(sa_qcontent_proj|self_attn\.q_content_proj)\.',
    hf_variant_rules() + [
        (_M + r'query_position_embeddings\.weight', 'bbox_head.query_embed.weight'),
        # Hub file: sa_qcontent_proj ...; module layout: self_attn.q_content_proj ...
        (_DEC + rf'(sa|ca)_({_PROJ_NAMES})_proj\.' + _LEAF, _decoder_proj),
        (_DEC + rf'(self_attn|encoder_attn)\.({_PROJ_NAMES})_proj\.' + _LEAF, _decoder_proj),
        (_DEC + r'(self_attn|encoder_attn)\.(?:out_proj|o_proj)\.' + _LEAF,
         lambda m: f'{_T}decoder.{m[1]}.{_ATTN[m[2]]}.out_proj.{m[3]}'),
        (_DEC + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'decoder.\1.ffn.linear\2.\3'),
        (_DEC + r'(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\.' + _LEAF,
         lambda m: f'{_T}decoder.{m[1]}.{_NORMS[m[2]]}.{m[3]}'),
        (_M + r'decoder\.(query_scale|ref_point_head)\.layers\.(\d)\.' + _LEAF,
         _T + r'\1.layers.\2.\3'),
        (r'class_labels_classifier\.' + _LEAF, r'bbox_head.class_embed.\1'),
    ],
    post=convert_hf_resnet_backbone)

DENSEVIT = detector_layout('densevit Conditional DETR',
                           r'^bbox_head\.transformer\.decoder\.\d+\.cross_attn\.q_spatial\.')


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    return [HF]


def convert_conditional_detr(state_dict, strict=False):
    """Convert an HF Conditional DETR checkpoint (or a densevit one) to densevit's keys
    (``strict``: as :func:`~densevit.checkpoint.layout.convert_state_dict`)."""
    return convert_state_dict(state_dict, [HF, DENSEVIT], 'Conditional DETR', strict)
