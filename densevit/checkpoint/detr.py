"""Whole-detector DETR checkpoints (official repo, Hugging Face) -> densevit's :class:`DETR`.

Layouts recognised from the keys:

- official (facebookresearch/detr, ``detr-r50-e632da11.pth`` ...):
  ``backbone.0.body.*`` (torchvision ResNet), ``transformer.encoder.layers.N.
  {self_attn.in_proj_*, self_attn.out_proj, linear1, linear2, norm1, norm2}``,
  ``transformer.decoder.layers.N.{self_attn, multihead_attn, linear1/2,
  norm1/2/3}``, ``transformer.decoder.norm``, ``input_proj``, ``query_embed``,
  ``class_embed``, ``bbox_embed.layers.N``. Same module types as densevit's
  (``nn.MultiheadAttention``), so only the names change.
- Hugging Face ``DetrForObjectDetection`` / ``DetrModel`` (Hub file layout and
  transformers-5 module layout): ``model.backbone.conv_encoder.model.*`` (a
  timm ResNet, whose names are torchvision's, or an HF ``ResNet``, converted
  by :func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`),
  ``model.{encoder,decoder}.layers.N.self_attn.{q,k,v}_proj`` (fused into
  ``in_proj_weight`` [3D, D] / ``in_proj_bias`` [3D], q-k-v order), ``out_proj`` / ``o_proj``,
  ``fc1/fc2`` (or ``mlp.fc1/fc2``), ``self_attn_layer_norm``, decoder
  ``encoder_attn`` (-> ``cross_attn``) and ``encoder_attn_layer_norm``,
  ``final_layer_norm``, ``model.decoder.layernorm``, ``model.input_projection``,
  ``model.query_position_embeddings``, ``class_labels_classifier``,
  ``bbox_predictor.layers.N``.

Output keys are the detector's: ``backbone.*`` and ``bbox_head.*``. The class
count follows the checkpoint (COCO: 91 ids + no-object = 92 logits in the
official files); build the head with the same ``num_classes`` to load it.
"""
from .layout import Layout, convert_state_dict
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'

OFFICIAL = Layout(
    'official DETR', r'^transformer\.encoder\.layers\.\d+\.self_attn\.in_proj_weight$',
    [
        (r'backbone\.0\.body\.(.+)', r'backbone.\1'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.(.+)',
         _T + r'\1.\2.self_attn.\3'),
        (r'transformer\.decoder\.layers\.(\d+)\.multihead_attn\.(.+)',
         _T + r'decoder.\1.cross_attn.\2'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.linear(1|2)\.' + _LEAF,
         _T + r'\1.\2.ffn.linear\3.\4'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.(norm[123])\.' + _LEAF,
         _T + r'\1.\2.\3.\4'),
        (r'transformer\.decoder\.norm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'(input_proj|class_embed)\.' + _LEAF, r'bbox_head.\1.\2'),
        (r'query_embed\.weight', 'bbox_head.query_embed.weight'),
        (r'bbox_embed\.layers\.(\d+)\.' + _LEAF, r'bbox_head.bbox_embed.layers.\1.\2'),
    ])

_M = r'(?:model\.)?'
_LAYER = _M + r'(encoder|decoder)\.layers\.(\d+)\.'
_PROJ_LEAF = {'weight': 'in_proj_weight', 'bias': 'in_proj_bias'}


def _in_proj(attn):
    def rename(m):
        return f'{_T}{m[1]}.{m[2]}.{attn}.{_PROJ_LEAF[m[4]]}@{m[3]}'
    return rename


HF = Layout(
    'Hugging Face DETR', r'(^|\.)encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)\.',
    [
        # timm backbone (torchvision names) or HF ResNet: both under conv_encoder.model
        (_M + r'backbone\.(?:conv_encoder\.)?model\.(.+)', r'backbone.\1'),
        (_M + r'input_projection\.' + _LEAF, r'bbox_head.input_proj.\1'),
        (_M + r'query_position_embeddings\.weight', 'bbox_head.query_embed.weight'),
        (_LAYER + r'self_attn\.(q|k|v)_proj\.' + _LEAF, _in_proj('self_attn')),
        (_LAYER + r'encoder_attn\.(q|k|v)_proj\.' + _LEAF, _in_proj('cross_attn')),
        (_LAYER + r'self_attn\.(?:out_proj|o_proj)\.' + _LEAF, _T + r'\1.\2.self_attn.out_proj.\3'),
        (_LAYER + r'encoder_attn\.(?:out_proj|o_proj)\.' + _LEAF,
         _T + r'\1.\2.cross_attn.out_proj.\3'),
        (_LAYER + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'\1.\2.ffn.linear\3.\4'),
        (_LAYER + r'self_attn_layer_norm\.' + _LEAF, _T + r'\1.\2.norm1.\3'),
        (_M + r'decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.' + _LEAF,
         _T + r'decoder.\1.norm2.\2'),
        (_M + r'encoder\.layers\.(\d+)\.final_layer_norm\.' + _LEAF, _T + r'encoder.\1.norm2.\2'),
        (_M + r'decoder\.layers\.(\d+)\.final_layer_norm\.' + _LEAF, _T + r'decoder.\1.norm3.\2'),
        (_M + r'decoder\.layernorm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'class_labels_classifier\.' + _LEAF, r'bbox_head.class_embed.\1'),
        (r'bbox_predictor\.layers\.(\d+)\.' + _LEAF, r'bbox_head.bbox_embed.layers.\1.\2'),
    ])

DENSEVIT = Layout('densevit DETR', r'^bbox_head\.transformer\.encoder\.\d+\.',
                  [(r'((?:backbone|neck|bbox_head)\..+)', r'\1')])


HF.post = convert_hf_resnet_backbone


def convert_detr(state_dict, strict=False):
    """Convert a whole DETR checkpoint's ``state_dict`` to densevit's ``DETR`` keys.

    Args:
        state_dict (dict): official / HF DETR (or densevit) tensors.
        strict (bool): raise on keys no rule explains (else kept, and reported
            as unexpected when loaded).

    Returns:
        OrderedDict with ``backbone.*`` and ``bbox_head.*`` keys.

    Raises:
        ValueError: the keys match no DETR layout (the first keys are listed).
    """
    return convert_state_dict(state_dict, [OFFICIAL, HF, DENSEVIT], 'DETR', strict)


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`)."""
    return [OFFICIAL, HF]
