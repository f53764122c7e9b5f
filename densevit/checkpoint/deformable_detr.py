"""Hugging Face ``DeformableDetrForObjectDetection`` / ``DeformableDetrModel`` checkpoints ->
densevit's :class:`DeformableDETR` (``backbone.*``, ``bbox_head.*``).

HF layout (transformers 4.x file names and the 5.x module layout):
``model.backbone.conv_encoder.model.*`` or ``model.backbone.model.*`` (a timm ResNet
with torchvision's names, or an HF ``ResNet``, converted by
:func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`), ``model.input_proj.N.
{0,1}``, ``model.level_embed``, ``model.query_position_embeddings`` ([Q, 2D]: query_pos
| tgt halves, as ours), ``model.reference_points``, encoder ``self_attn.{sampling_offsets,
attention_weights, value_proj, output_proj}`` (same names as ours), decoder
``self_attn.{q,k,v}_proj`` ([D, D] each, fused into ``nn.MultiheadAttention``'s
``in_proj_weight`` [3D, D]), ``o_proj``/``out_proj``, ``encoder_attn`` (->
``cross_attn``), ``fc1/fc2`` or ``mlp.fc1/fc2``, ``*_layer_norm``, ``class_embed.N`` /
``bbox_embed.N``.

Without box refinement HF keeps one shared predictor under every index N; we keep
one module, so indices > 0 are dropped (they are the same tensors). With refinement
(build the head with ``with_box_refine=True``) every index is its own layer.
``model.decoder.bbox_embed.*`` is HF's second reference to ``bbox_embed`` (dropped).

Two-stage (``two_stage=True``; build the head with ``as_two_stage=True``): no
``query_position_embeddings`` / ``reference_points``; ``model.enc_output``,
``enc_output_norm``, ``pos_trans``, ``pos_trans_norm`` -> ``bbox_head.proposals.
{memory_fc, memory_norm, pos_fc, pos_norm}``; the encoder's predictors are the extra
index N = decoder layers of ``class_embed`` / ``bbox_embed`` (as ours), and
``model.decoder.class_embed.*`` is HF's second reference to ``class_embed`` (dropped).
"""
from .layout import Layout, convert_state_dict
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'
_M = r'(?:model\.)?'
_LAYER = _M + r'(encoder|decoder)\.layers\.(\d+)\.'
_NORMS = {('encoder', 'self_attn_layer_norm'): 'norm1', ('encoder', 'final_layer_norm'): 'norm2',
          ('decoder', 'self_attn_layer_norm'): 'norm1',
          ('decoder', 'encoder_attn_layer_norm'): 'norm2',
          ('decoder', 'final_layer_norm'): 'norm3'}
_LEAF_IN = {'weight': 'in_proj_weight', 'bias': 'in_proj_bias'}
_TWO_STAGE = {'enc_output': 'memory_fc', 'enc_output_norm': 'memory_norm',
              'pos_trans': 'pos_fc', 'pos_trans_norm': 'pos_norm'}


def _predictor(refine):
    """class_embed.N / bbox_embed.N: per layer with refinement, else only N = 0 kept."""
    def rename(m):
        name, idx, rest = m[1], int(m[2]), m[3]
        return f'bbox_head.{name}.{idx}.{rest}' if refine else f'bbox_head.{name}.{rest}'
    return rename


def hf_layout(refine):
    drop = {_M + r'decoder\.bbox_embed\..+': "HF's second reference to bbox_embed",
            _M + r'decoder\.class_embed\..+': "HF's second reference to class_embed"}
    if not refine:
        drop[r'(class_embed|bbox_embed)\.([1-9]\d*)\..+'] = 'shared predictor (same as index 0)'
    return Layout(
        'Hugging Face Deformable DETR', r'(^|\.)encoder\.layers\.\d+\.self_attn\.sampling_offsets',
        [
            (_M + r'backbone\.(?:conv_encoder\.)?model\.(.+)', r'backbone.\1'),
            (_M + r'input_proj\.(\d+)\.(0|1)\.' + _LEAF, r'bbox_head.input_proj.\1.\2.\3'),
            (_M + r'level_embed', _T + 'level_embed'),
            (_M + r'query_position_embeddings\.weight', 'bbox_head.query_embed.weight'),
            (_M + r'reference_points\.' + _LEAF, r'bbox_head.reference_points.\1'),
            (_LAYER + r'self_attn\.(sampling_offsets|attention_weights|value_proj|output_proj)\.'
             + _LEAF, _T + r'\1.\2.self_attn.\3.\4'),
            (_LAYER + r'encoder_attn\.(sampling_offsets|attention_weights|value_proj|output_proj)'
             r'\.' + _LEAF, _T + r'\1.\2.cross_attn.\3.\4'),
            (_LAYER + r'self_attn\.(q|k|v)_proj\.' + _LEAF,
             lambda m: f'{_T}{m[1]}.{m[2]}.self_attn.{_LEAF_IN[m[4]]}@{m[3]}'),
            (_LAYER + r'self_attn\.(?:out_proj|o_proj)\.' + _LEAF,
             _T + r'\1.\2.self_attn.out_proj.\3'),
            (_LAYER + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'\1.\2.ffn.linear\3.\4'),
            (_LAYER + r'(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\.'
             + _LEAF, lambda m: f'{_T}{m[1]}.{m[2]}.{_NORMS[m[1], m[3]]}.{m[4]}'),
            (_M + r'(enc_output|enc_output_norm|pos_trans|pos_trans_norm)\.' + _LEAF,
             lambda m: f'bbox_head.proposals.{_TWO_STAGE[m[1]]}.{m[2]}'),
            (r'(class_embed|bbox_embed)\.(\d+)\.(.+)', _predictor(refine)),
        ],
        drop=drop, post=convert_hf_resnet_backbone)


DENSEVIT = Layout('densevit Deformable DETR', r'^bbox_head\.transformer\.encoder\.\d+\.',
                  [(r'((?:backbone|neck|bbox_head)\..+)', r'\1')])


def convert_deformable_detr(state_dict, strict=False, with_box_refine=None):
    """Convert a whole Deformable DETR checkpoint to densevit's ``DeformableDETR`` keys.

    Args:
        state_dict (dict): HF (or densevit) tensors.
        strict (bool): raise on keys no rule explains.
        with_box_refine (bool | None): the checkpoint's box refinement; None: inferred
            (HF gives the decoder its own reference ``model.decoder.bbox_embed`` only then).
    """
    if with_box_refine is None:
        with_box_refine = any('decoder.bbox_embed.' in k for k in state_dict)
    return convert_state_dict(state_dict, [hf_layout(with_box_refine), DENSEVIT],
                              'Deformable DETR', strict)


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`)."""
    return [hf_layout(any('decoder.bbox_embed.' in k for k in state_dict))]
