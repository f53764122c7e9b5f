"""Whole SETR segmentors from MMSegmentation 1.x -> densevit's ``EncoderDecoder``.

mmseg's SETR model zoo (``configs/setr/setr_vit-l_{naive,pup,mla}_8xb2-160k_ade20k-512x512``)
is where trained SETR weights exist. Two layouts, told apart by the keys
(:func:`model_layouts`):

**Naive / PUP** (``SETRUPHead`` decode head and auxiliary heads):

==============================================  ==========================================
mmseg                                           densevit
==============================================  ==========================================
``backbone.*``                                  ``backbone.*`` (mmseg ViT, see ``vit.py``)
``{decode_head,auxiliary_head.K}.norm``         ``...norm`` (token LayerNorm); a single
                                                auxiliary head (``auxiliary_head.norm``) is
                                                densevit's ``auxiliary_head.0``
``...up_convs.I.0.{conv,bn}`` (ConvModule)      ``...up_convs.I.{conv,bn}``
``...conv_seg``                                 ``...conv_seg``
==============================================  ==========================================

(``up_convs.I.1`` is mmseg's parameter-free ``Upsample``; densevit upsamples in
``forward``.)

**MLA** (``MLANeck`` + ``SETRMLAHead``, ``FCNHead(num_convs=0)`` auxiliary heads), with
N levels (N = 4 in the zoo):

==================================================  =======================================
mmseg                                               densevit
==================================================  =======================================
``neck.norm.I``                                     ``neck.norms.I``
``neck.mla.channel_proj.I.{conv,bn}``               ``neck.lateral_convs.I.{conv,bn}``
``neck.mla.feat_extract.J.{conv,bn}``               ``neck.out_convs.(N-1-J).{conv,bn}``
``decode_head.up_convs.J.{0,1}.{conv,bn}``          ``decode_head.branches.(N-1-J).{0,1}.*``
``decode_head.conv_seg.weight`` [K, N*m, 1, 1]      the same, its N input blocks reversed
``auxiliary_head.J.conv_seg``                       ``auxiliary_head.(N-1-J).conv_seg``
==================================================  =======================================

Facts behind the MLA reversals (mmseg 1.2.2, ``necks/mla_neck.py``,
``decode_heads/setr_mla_head.py``): mmseg's ``MLAModule`` projects level I with
``channel_proj[I]`` (shallow first), then reverses the list: its cumulative sums and
``feat_extract[J]`` run deepest first and the neck *returns the levels deepest first*.
densevit's ``MLANeck`` returns them shallow first. So mmseg's output J is densevit's
output N-1-J, and everything that reads output J moves with it: the MLA head's branch
J, the J-th block of ``mla_channels`` input channels of its classifier (the branches
are concatenated in reading order) and the auxiliary head with ``in_index=J`` (in the
zoo auxiliary head J reads level J; densevit's configs read level J with auxiliary
head J, shallow first). The auxiliary ``FCNHead(num_convs=0, concat_input=False)`` is a
bare classifier (``conv_seg``), densevit's ``SETRUPHead(norm_layer=None,
num_convs=0)``.

Everything else as in the backbone layout: zero patch bias added, class-token row kept
(dropped by a ViT without class token), LayerNorm eps 1e-6 (the layouts' options).
"""
import re

import torch

from .layout import MMSEG_HEAD as _HEAD
from .layout import Layout, prefixed_rules
from .layout import mmseg_head as _head
from .vit import MMSEG_RULES, add_patch_bias

_LEAF = r'(weight|bias|running_mean|running_var|num_batches_tracked)'


def _backbone_rules():
    """mmseg ViT rules under ``backbone.``."""
    return prefixed_rules(MMSEG_RULES, r'backbone\.', 'backbone.')


def _backbone_post(state_dict):
    return add_patch_bias(state_dict, 'backbone.')


UP = Layout(
    'MMSegmentation SETR (Naive / PUP)', r'^decode_head\.up_convs\.\d+\.0\.conv\.weight$',
    _backbone_rules() + [
        (_HEAD + r'norm\.(weight|bias)', lambda m: f'{_head(m[1])}.norm.{m[2]}'),
        (_HEAD + r'up_convs\.(\d+)\.0\.(conv|bn)\.' + _LEAF,
         lambda m: f'{_head(m[1])}.up_convs.{m[2]}.{m[3]}.{m[4]}'),
        (_HEAD + r'conv_seg\.(weight|bias)', lambda m: f'{_head(m[1])}.conv_seg.{m[2]}'),
    ],
    post=_backbone_post, options={'layer_norm_eps': 1e-6})


def num_mla_levels(state_dict):
    """N, from ``neck.mla.channel_proj.I`` (0 when the keys are not mmseg's MLA neck)."""
    found = {int(m[1]) for k in state_dict
             if (m := re.match(r'neck\.mla\.channel_proj\.(\d+)\.conv\.weight$', k))}
    return len(found)


def _reverse_classifier_blocks(state_dict, levels):
    """``decode_head.conv_seg.weight`` [K, N*m, 1, 1]: input blocks in densevit's level order."""
    key = 'decode_head.conv_seg.weight'
    weight = state_dict.get(key)
    if weight is not None and weight.shape[1] % levels == 0:
        state_dict[key] = torch.cat(weight.chunk(levels, dim=1)[::-1], dim=1)
    return state_dict


def mla_layout(levels):
    """The SETR-MLA layout for ``levels`` MLA levels (N)."""
    def flip(i):
        return str(levels - 1 - int(i))

    def post(state_dict):
        return _reverse_classifier_blocks(_backbone_post(state_dict), levels)

    leaf = r'\.(conv|bn)\.' + _LEAF
    return Layout(
        'MMSegmentation SETR-MLA', r'^neck\.mla\.channel_proj\.\d+\.conv\.weight$',
        _backbone_rules() + [
            (r'neck\.norm\.(\d+)\.(weight|bias)', r'neck.norms.\1.\2'),
            (r'neck\.mla\.channel_proj\.(\d+)' + leaf, r'neck.lateral_convs.\1.\2.\3'),
            (r'neck\.mla\.feat_extract\.(\d+)' + leaf,
             lambda m: f'neck.out_convs.{flip(m[1])}.{m[2]}.{m[3]}'),
            (r'decode_head\.up_convs\.(\d+)\.([01])' + leaf,
             lambda m: f'decode_head.branches.{flip(m[1])}.{m[2]}.{m[3]}.{m[4]}'),
            (r'decode_head\.conv_seg\.(weight|bias)', r'decode_head.conv_seg.\1'),
            (r'auxiliary_head\.(\d+)\.conv_seg\.(weight|bias)',
             lambda m: f'auxiliary_head.{flip(m[1])}.conv_seg.{m[2]}'),
        ],
        post=post, options={'layer_norm_eps': 1e-6})


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`): none
    unless the backbone is mmseg's ViT; MLA when the neck is mmseg's ``MLANeck``."""
    if not any(re.match(r'backbone\.layers\.\d+\.attn\.attn\.in_proj_weight$', k)
               for k in state_dict):
        return []
    levels = num_mla_levels(state_dict)
    return [mla_layout(levels)] if levels else [UP]
