"""Whole Deformable DETR checkpoints -> densevit's :class:`DeformableDETR` (``backbone.*``,
``bbox_head.*``; ``T`` below is ``bbox_head.transformer.``). Three origins, each recognised
by names only it uses; tensors are copied unchanged unless said otherwise.

**MMDetection 3.x** ``DeformableDETR`` (zoo ``deformable-detr[-refine[-twostage]]_r50_…``;
mmdet/models/detectors/deformable_detr.py, layers/transformer/deformable_detr_layers.py,
dense_heads/deformable_detr_head.py, necks/channel_mapper.py). Signature
``encoder.layers.N.self_attn.sampling_offsets`` at the root.

- ``backbone.*``: mmdet ``ResNet`` (torchvision's names) -> ``backbone.*``.
- ``neck.convs.N.{conv,gn}`` -> ``bbox_head.input_proj.N.{0,1}``; ``neck.extra_convs.i`` ->
  ``input_proj.{len(convs) + i}`` (the first from the last backbone map, as ours). The
  ChannelMapper's ``ConvModule`` has a norm, so its convs have **no bias** (``bias='auto'``):
  ``input_proj.N.0.bias`` is loaded as **zeros** (the same function).
- ``level_embed`` -> ``T.level_embed``; ``query_embedding.weight`` [Q, 2D] ->
  ``bbox_head.query_embed.weight`` (split as ours: query_pos first, then the content
  query); ``reference_points_fc`` -> ``bbox_head.reference_points`` (Linear D -> 2).
- ``encoder.layers.N``: ``self_attn.{sampling_offsets, attention_weights, value_proj,
  output_proj}`` (mmcv ``MultiScaleDeformableAttention``, residual inside it) ->
  ``T.encoder.N.self_attn.*``; ``norms.{0,1}`` -> ``norm{1,2}``; ``ffn.layers.0.0`` /
  ``ffn.layers.1`` -> ``ffn.linear1`` / ``ffn.linear2``.
- ``decoder.layers.N``: ``self_attn.attn.{in_proj_*, out_proj.*}`` (mmcv
  ``MultiheadAttention`` around ``nn.MultiheadAttention``) -> ``T.decoder.N.self_attn.*``;
  ``cross_attn.*`` -> ``cross_attn.*``; ``norms.{0,1,2}`` (after self-attention,
  cross-attention, FFN) -> ``norm{1,2,3}``; FFN as the encoder's.
- ``bbox_head.cls_branches.N`` (Linear D -> K, sigmoid: no "no object" logit) ->
  ``bbox_head.class_embed[.N]``; ``bbox_head.reg_branches.N.{0,2,4}`` (Linear, ReLU,
  Linear, ReLU, Linear) -> ``bbox_head.bbox_embed[.N].layers.{0,1,2}``. Without box
  refinement mmdet shares one predictor (``share_pred_layer``) but saves it under every
  index N: all indices hold equal tensors, so only N = 0 is kept (one module, as ours);
  with refinement the indices differ and each is its own layer. The file has no flag for
  refinement: it is read from whether the indices are equal.
- Two-stage: ``memory_trans_fc``, ``memory_trans_norm``, ``pos_trans_fc``,
  ``pos_trans_norm`` -> ``bbox_head.proposals.{memory_fc, memory_norm, pos_fc, pos_norm}``;
  the encoder's predictors are the extra index N = decoder layers (as ours); no
  ``query_embedding`` / ``reference_points_fc``. mmdet also allows two-stage without
  refinement (one shared predictor for the encoder too); densevit's head does not.
- Not in the keys, so assumed as the zoo configs have them: the ChannelMapper has
  ``act_cfg=None`` (no activation after its GroupNorm, as our ``input_proj``), and the
  positional encoding is ``normalize=True, offset=-0.5``.

**Official** fundamentalvision/Deformable-DETR (models/deformable_detr.py,
deformable_transformer.py, backbone.py). Signature ``transformer.encoder.layers.N.self_attn
.sampling_offsets``.

- ``backbone.0.body.*`` (torchvision ResNet, FrozenBatchNorm2d) -> ``backbone.*``.
- ``input_proj.N.{0,1}`` (conv with bias, GroupNorm) -> ``bbox_head.input_proj.N.{0,1}``.
- ``transformer.level_embed``; ``query_embed.weight`` (query_pos | tgt halves, as ours);
  ``transformer.reference_points``; two-stage ``transformer.{enc_output, enc_output_norm,
  pos_trans, pos_trans_norm}`` -> ``proposals.{memory_fc, memory_norm, pos_fc, pos_norm}``.
- encoder layer: ``self_attn.*``, ``norm1``, ``linear1``, ``linear2``, ``norm2``.
- decoder layer: ``self_attn`` (``nn.MultiheadAttention``, same names), ``cross_attn``;
  **norms swapped**: official ``norm2`` follows self-attention (-> ``norm1``), ``norm1``
  follows cross-attention (-> ``norm2``), ``norm3`` the FFN.
- ``class_embed.N`` / ``bbox_embed.N.layers.K``: shared (indices > 0 dropped) unless
  refined; ``transformer.decoder.bbox_embed.*`` (refinement) and
  ``transformer.decoder.class_embed.*`` (two-stage) are second references (dropped).
- The class count follows the checkpoint: official COCO files have 91 logits (indexed by
  COCO category id), not 80.

**Hugging Face** ``DeformableDetrForObjectDetection`` / ``DeformableDetrModel`` (4.x files,
5.x module layout). Signature ``encoder.layers.N.self_attn_layer_norm`` (a name only HF
uses). ``model.backbone.conv_encoder.model.*`` or ``model.backbone.model.*`` (a timm ResNet
with torchvision's names, or an HF ``ResNet``, converted by
:func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`), ``model.input_proj.N.{0,1}``,
``model.level_embed``, ``model.query_position_embeddings`` ([Q, 2D], halves as ours),
``model.reference_points``, encoder ``self_attn.*`` (same names as ours), decoder
``self_attn.{q,k,v}_proj`` ([D, D] each, fused into ``in_proj_weight`` [3D, D]),
``o_proj``/``out_proj``, ``encoder_attn`` (-> ``cross_attn``), ``fc1/fc2`` or
``mlp.fc1/fc2``, ``self_attn_layer_norm`` / ``encoder_attn_layer_norm`` /
``final_layer_norm`` (-> ``norm1`` / ``norm2`` / last norm), ``class_embed.N`` /
``bbox_embed.N`` (shared unless refined, as the official; refinement is told by
``model.decoder.bbox_embed``, a second reference, dropped like
``model.decoder.class_embed``), two-stage ``model.{enc_output, enc_output_norm, pos_trans,
pos_trans_norm}``.

**MMDetection 3.x** ``DINO`` (zoo ``dino-4scale_r50_…``; mmdet/models/detectors/dino.py,
layers/transformer/dino_layers.py) -> densevit's ``DeformableDETR`` with a ``DINOHead``:
MMDetection's Deformable DETR layout (two-stage with refinement) plus
``query_embedding.weight`` [Q, D] (content queries only) -> ``bbox_head.content_embed``,
``decoder.ref_point_head.layers.{0,1}`` -> ``bbox_head.query_pos_head.layers.{0,1}``,
``decoder.norm`` -> ``bbox_head.decoder_norm``, ``dn_query_generator.label_embedding`` ->
``bbox_head.dn.label_embed``; no ``pos_trans_*``. Signature ``decoder.ref_point_head``.

Build the densevit head with the checkpoint's ``with_box_refine``, ``as_two_stage``,
``num_classes``, ``num_queries``, levels and widths (the configs in
``configs/deformable_detr/`` mirror the mmdet zoo's).
"""
import re
from collections import OrderedDict

import torch

from .layout import Layout, convert_state_dict, detector_layout
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'
_MSDA = r'(sampling_offsets|attention_weights|value_proj|output_proj)'
_TWO_STAGE = {'enc_output': 'memory_fc', 'enc_output_norm': 'memory_norm',
              'pos_trans': 'pos_fc', 'pos_trans_norm': 'pos_norm',
              'memory_trans_fc': 'memory_fc', 'memory_trans_norm': 'memory_norm',
              'pos_trans_fc': 'pos_fc'}


def _predictor(name, refine, layers=lambda m: m):
    """``{name}.N.rest`` -> ``bbox_head.{name}.N.rest`` (refined) or ``bbox_head.{name}.rest``."""
    def rename(m):
        idx, rest = int(m[1]), layers(m[2])
        return f'bbox_head.{name}.{idx}.{rest}' if refine else f'bbox_head.{name}.{rest}'
    return rename


def _shared_drop(prefix, names):
    return {prefix + rf'({names})\.([1-9]\d*)\..+': 'shared predictor (same as index 0)'}


# ---------------------------------------------------------------- Hugging Face
_M = r'(?:model\.)?'
_HF_LAYER = _M + r'(encoder|decoder)\.layers\.(\d+)\.'
_HF_NORMS = {('encoder', 'self_attn_layer_norm'): 'norm1',
             ('encoder', 'final_layer_norm'): 'norm2',
             ('decoder', 'self_attn_layer_norm'): 'norm1',
             ('decoder', 'encoder_attn_layer_norm'): 'norm2',
             ('decoder', 'final_layer_norm'): 'norm3'}
_LEAF_IN = {'weight': 'in_proj_weight', 'bias': 'in_proj_bias'}


def hf_layout(refine):
    drop = {_M + r'decoder\.bbox_embed\..+': "HF's second reference to bbox_embed",
            _M + r'decoder\.class_embed\..+': "HF's second reference to class_embed"}
    if not refine:
        drop.update(_shared_drop('', 'class_embed|bbox_embed'))
    return Layout(
        'Hugging Face Deformable DETR', r'(^|\.)encoder\.layers\.\d+\.self_attn_layer_norm\.',
        [
            (_M + r'backbone\.(?:conv_encoder\.)?model\.(.+)', r'backbone.\1'),
            (_M + r'input_proj\.(\d+)\.(0|1)\.' + _LEAF, r'bbox_head.input_proj.\1.\2.\3'),
            (_M + r'level_embed', _T + 'level_embed'),
            (_M + r'query_position_embeddings\.weight', 'bbox_head.query_embed.weight'),
            (_M + r'reference_points\.' + _LEAF, r'bbox_head.reference_points.\1'),
            (_HF_LAYER + r'self_attn\.' + _MSDA + r'\.' + _LEAF, _T + r'\1.\2.self_attn.\3.\4'),
            (_HF_LAYER + r'encoder_attn\.' + _MSDA + r'\.' + _LEAF,
             _T + r'\1.\2.cross_attn.\3.\4'),
            (_HF_LAYER + r'self_attn\.(q|k|v)_proj\.' + _LEAF,
             lambda m: f'{_T}{m[1]}.{m[2]}.self_attn.{_LEAF_IN[m[4]]}@{m[3]}'),
            (_HF_LAYER + r'self_attn\.(?:out_proj|o_proj)\.' + _LEAF,
             _T + r'\1.\2.self_attn.out_proj.\3'),
            (_HF_LAYER + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'\1.\2.ffn.linear\3.\4'),
            (_HF_LAYER + r'(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\.'
             + _LEAF, lambda m: f'{_T}{m[1]}.{m[2]}.{_HF_NORMS[m[1], m[3]]}.{m[4]}'),
            (_M + r'(enc_output|enc_output_norm|pos_trans|pos_trans_norm)\.' + _LEAF,
             lambda m: f'bbox_head.proposals.{_TWO_STAGE[m[1]]}.{m[2]}'),
            (r'class_embed\.(\d+)\.(.+)', _predictor('class_embed', refine)),
            (r'bbox_embed\.(\d+)\.(.+)', _predictor('bbox_embed', refine)),
        ],
        drop=drop, post=convert_hf_resnet_backbone)


# ---------------------------------------------------------------- official
_OFFICIAL_DECODER_NORMS = {'1': 'norm2', '2': 'norm1', '3': 'norm3'}


def official_layout(refine):
    drop = {r'transformer\.decoder\.bbox_embed\..+': 'second reference to bbox_embed',
            r'transformer\.decoder\.class_embed\..+': 'second reference to class_embed'}
    if not refine:
        drop.update(_shared_drop('', 'class_embed|bbox_embed'))
    enc, dec = r'transformer\.encoder\.layers\.(\d+)\.', r'transformer\.decoder\.layers\.(\d+)\.'
    return Layout(
        'official Deformable DETR', r'^transformer\.encoder\.layers\.\d+\.self_attn\.'
                                    r'sampling_offsets\.',
        [
            (r'backbone\.0\.body\.(.+)', r'backbone.\1'),
            (r'input_proj\.(\d+)\.(0|1)\.' + _LEAF, r'bbox_head.input_proj.\1.\2.\3'),
            (r'transformer\.level_embed', _T + 'level_embed'),
            (r'query_embed\.weight', 'bbox_head.query_embed.weight'),
            (r'transformer\.reference_points\.' + _LEAF, r'bbox_head.reference_points.\1'),
            (r'transformer\.(enc_output|enc_output_norm|pos_trans|pos_trans_norm)\.' + _LEAF,
             lambda m: f'bbox_head.proposals.{_TWO_STAGE[m[1]]}.{m[2]}'),
            (enc + r'self_attn\.' + _MSDA + r'\.' + _LEAF, _T + r'encoder.\1.self_attn.\2.\3'),
            (enc + r'linear(1|2)\.' + _LEAF, _T + r'encoder.\1.ffn.linear\2.\3'),
            (enc + r'norm(1|2)\.' + _LEAF, _T + r'encoder.\1.norm\2.\3'),
            (dec + r'cross_attn\.' + _MSDA + r'\.' + _LEAF, _T + r'decoder.\1.cross_attn.\2.\3'),
            (dec + r'self_attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)',
             _T + r'decoder.\1.self_attn.\2'),
            (dec + r'linear(1|2)\.' + _LEAF, _T + r'decoder.\1.ffn.linear\2.\3'),
            (dec + r'norm(1|2|3)\.' + _LEAF,
             lambda m: f'{_T}decoder.{m[1]}.{_OFFICIAL_DECODER_NORMS[m[2]]}.{m[3]}'),
            (r'class_embed\.(\d+)\.(.+)', _predictor('class_embed', refine)),
            (r'bbox_embed\.(\d+)\.(.+)', _predictor('bbox_embed', refine)),
        ],
        drop=drop)


# ---------------------------------------------------------------- MMDetection
_MM_FFN = {'layers.0.0': 'linear1', 'layers.1': 'linear2'}


def _mm_reg_layer(rest):
    """``reg_branches.N`` is Sequential(Linear, ReLU, Linear, ReLU, Linear): modules 0, 2, 4
    are our MLP's ``layers.0, 1, 2``."""
    idx, leaf = rest.split('.')
    return f'layers.{int(idx) // 2}.{leaf}'


def _zero_input_proj_bias(state_dict):
    """Add a zero bias to every input projection conv saved without one (ChannelMapper)."""
    out = OrderedDict()
    for k, v in state_dict.items():
        out[k] = v
        m = re.fullmatch(r'(bbox_head\.input_proj\.\d+\.0\.)weight', k)
        if m and m[1] + 'bias' not in state_dict:
            out[m[1] + 'bias'] = v.new_zeros(v.shape[0])
    return out


# DINO's additions to MMDetection's Deformable DETR layout (tried before its rules)
_MM_DINO = [
    (r'query_embedding\.weight', 'bbox_head.content_embed.weight'),
    (r'decoder\.ref_point_head\.layers\.(0|1)\.' + _LEAF,
     r'bbox_head.query_pos_head.layers.\1.\2'),
    (r'decoder\.norm\.' + _LEAF, r'bbox_head.decoder_norm.\1'),
    (r'dn_query_generator\.label_embedding\.weight', 'bbox_head.dn.label_embed.weight'),
]


def mmdet_layout(refine, num_convs, dino=False):
    """``num_convs``: the ChannelMapper's 1x1 convs (its extra convs follow them);
    ``dino``: MMDetection's ``DINO`` (signature: the decoder's ``ref_point_head``)."""
    drop = {} if refine else _shared_drop(r'bbox_head\.', 'cls_branches|reg_branches')
    dec = r'decoder\.layers\.(\d+)\.'
    name, signature = ('MMDetection DINO', r'^decoder\.ref_point_head\.') if dino else \
        ('MMDetection Deformable DETR', r'^encoder\.layers\.\d+\.self_attn\.sampling_offsets\.')
    return Layout(
        name, signature,
        (_MM_DINO if dino else []) + [
            (r'(backbone\..+)', r'\1'),
            (r'neck\.convs\.(\d+)\.conv\.' + _LEAF, r'bbox_head.input_proj.\1.0.\2'),
            (r'neck\.convs\.(\d+)\.gn\.' + _LEAF, r'bbox_head.input_proj.\1.1.\2'),
            (r'neck\.extra_convs\.(\d+)\.(conv|gn)\.' + _LEAF,
             lambda m: f'bbox_head.input_proj.{num_convs + int(m[1])}.'
                       f'{int(m[2] == "gn")}.{m[3]}'),
            (r'level_embed', _T + 'level_embed'),
            (r'query_embedding\.weight', 'bbox_head.query_embed.weight'),
            (r'reference_points_fc\.' + _LEAF, r'bbox_head.reference_points.\1'),
            (r'(memory_trans_fc|memory_trans_norm|pos_trans_fc|pos_trans_norm)\.' + _LEAF,
             lambda m: f'bbox_head.proposals.{_TWO_STAGE[m[1]]}.{m[2]}'),
            (r'(encoder|decoder)\.layers\.(\d+)\.(self_attn|cross_attn)\.' + _MSDA + r'\.'
             + _LEAF, _T + r'\1.\2.\3.\4.\5'),
            (dec + r'self_attn\.attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|'
                   r'out_proj\.bias)', _T + r'decoder.\1.self_attn.\2'),
            (r'(encoder|decoder)\.layers\.(\d+)\.ffn\.(layers\.0\.0|layers\.1)\.' + _LEAF,
             lambda m: f'{_T}{m[1]}.{m[2]}.ffn.{_MM_FFN[m[3]]}.{m[4]}'),
            (r'(encoder|decoder)\.layers\.(\d+)\.norms\.(\d)\.' + _LEAF,
             lambda m: f'{_T}{m[1]}.{m[2]}.norm{int(m[3]) + 1}.{m[4]}'),
            (r'bbox_head\.cls_branches\.(\d+)\.(.+)', _predictor('class_embed', refine)),
            (r'bbox_head\.reg_branches\.(\d+)\.([024]\.(?:weight|bias))',
             _predictor('bbox_embed', refine, layers=_mm_reg_layer)),
        ],
        drop=drop, post=_zero_input_proj_bias)


def _mmdet_refined(state_dict):
    """mmdet saves a shared predictor under every index: refined iff some index differs."""
    groups = {}
    for k, v in state_dict.items():
        m = re.fullmatch(r'bbox_head\.(cls_branches|reg_branches)\.(\d+)\.(.+)', k)
        if m:
            groups.setdefault((m[1], m[3]), []).append(v)
    return any(t.shape != ts[0].shape or not torch.equal(t, ts[0])
               for ts in groups.values() for t in ts[1:])


DENSEVIT = detector_layout('densevit Deformable DETR', r'^bbox_head\.transformer\.encoder\.\d+\.')


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`)."""
    keys = list(state_dict)
    num_convs = len({k.split('.')[2] for k in keys if k.startswith('neck.convs.')})
    refined = _mmdet_refined(state_dict)
    return [hf_layout(any(re.match(_M + r'decoder\.bbox_embed\.', k) for k in keys)),
            official_layout(any(k.startswith('transformer.decoder.bbox_embed.') for k in keys)),
            mmdet_layout(refined, num_convs), mmdet_layout(refined, num_convs, dino=True)]


def convert_deformable_detr(state_dict, strict=False):
    """Convert a whole Deformable DETR checkpoint (MMDetection, official, HF or densevit) to
    densevit's ``DeformableDETR`` keys; box refinement is read from the checkpoint.

    Args:
        state_dict (dict): source tensors.
        strict (bool): raise on keys no rule explains.
    """
    return convert_state_dict(state_dict, model_layouts(state_dict) + [DENSEVIT],
                              'Deformable DETR', strict)
