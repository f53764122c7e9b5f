"""Whole UperNet segmentors -> densevit's ``EncoderDecoder`` with a ``UPerHead`` and
``FCNHead`` auxiliary heads, from MMSegmentation 1.x and from Hugging Face transformers.

MMSegmentation: its Swin model zoo (``configs/swin/swin-{tiny,small,base,...}-..._upernet_
8xb2-160k_ade20k-512x512``) is UperNet on a Swin backbone, with one ``FCNHead`` on stage 3 as
the auxiliary head (a dict in the config: keys ``auxiliary_head.*`` without an index).

==================================================  =======================================
mmseg                                               densevit
==================================================  =======================================
``backbone.*`` (mmseg ``SwinTransformer``)          ``backbone.*``: the MMSegmentation Swin
                                                    layout of ``swin.py`` (renamed; patch
                                                    merging re-indexed from unfold order)
``decode_head.psp_modules.I.1.{conv,bn}``           the same (densevit's ``PyramidPooling``
                                                    keeps mmseg's ``PPM`` names)
``decode_head.{bottleneck,fpn_bottleneck}.*``,      the same
``decode_head.{lateral_convs,fpn_convs}.I.*``
``auxiliary_head.{convs.I,conv_cat}.{conv,bn}``     ``auxiliary_head.0.*`` (densevit's
                                                    auxiliary heads are always a list); an
                                                    indexed ``auxiliary_head.K.*`` as it is
``{decode_head,auxiliary_head}.conv_seg``           the same
==================================================  =======================================

The heads' computation is mmseg's step for step (``densevit/models/heads/uper_head.py``,
``fcn_head.py``), so no tensor is reordered. Origin option: ``always_shift=True`` (mmseg's
Swin shifts every second block whatever the map size).

MMSegmentation's BEiT models (``configs/beit/beit-{base,large}_upernet_*_ade20k-640x640``, on
``configs/_base_/models/upernet_beit.py``) are UperNet on mmseg's ``BEiT`` through a
``Feature2Pyramid`` neck (the outputs of layers 4, 6, 8, 12 rescaled by 4, 2, 1, 1/2), with the
same heads (the auxiliary one on the third map):

==================================================  =======================================
mmseg                                               densevit
==================================================  =======================================
``backbone.*`` (mmseg ``BEiT``)                     ``backbone.*``: the MMSegmentation BEiT
                                                    layout of ``mmseg_beit.py`` (renamed;
                                                    each relative-position table split into
                                                    its offsets and the class token's three
                                                    rows; index buffers dropped)
``neck.upsample_4x.{0,1,3}.*``,                     the same (densevit's ``Feature2Pyramid``
``neck.upsample_2x.0.*``                            keeps mmseg's module names)
``decode_head.*``, ``auxiliary_head.*``             as for Swin
==================================================  =======================================

Origin option ``layer_norm_eps=1e-6`` (the zoo's ``norm_cfg``). The densevit model these
files fit: ``configs/beit/beit_vit-b16_upernet_512x512_ade20k.py`` (``VisionTransformer`` with
``qkv_bias=(True, False, True)``, LayerScale, ``pos_embed=dict(type='relative')``,
``out_indices=(3, 5, 7, 11)``, ``final_norm=False``; ``Feature2Pyramid``) with the file's
``img_size`` (640 in the zoo), ``layer_norm_eps=1e-6`` and ``crop_to_patch=True`` (mmseg's
patch convolution drops what does not fill a patch). mmseg's BEiT never resizes its table:
it runs only on inputs of its ``img_size`` patch grid (the zoo's slide test feeds 640 windows),
so equality is proven on that grid alone. Other mmseg UperNet backbones (ResNet-V1c, ViT with
its multi-level neck, ConvNeXt, ...) are not recognised here.

Hugging Face ``UperNetForSemanticSegmentation`` on a ``SwinBackbone`` (``backbone_config`` a
``SwinConfig`` with ``out_features`` stage1..4; the ``openmmlab/upernet-swin-*`` Hub models),
the file ``save_pretrained`` writes (``model.safetensors``) or the module's state dict.
HF's ``UperNetHead`` / ``UperNetFCNHead`` are mmseg's heads with other names
(``UperNetConvModule`` = conv without bias, ``batch_norm``, ReLU):

==================================================  =======================================
Hugging Face                                        densevit
==================================================  =======================================
``backbone.*`` (``SwinBackbone``)                   ``backbone.*``: ``swin.py``'s Hugging
                                                    Face ``SwinBackbone`` layout (q, k, v
                                                    fused; ``hidden_states_norms.stageK``
                                                    -> ``norm{K-1}``)
``decode_head.psp_modules.I.1.{conv,batch_norm}``   ``decode_head.psp_modules.I.1.{conv,bn}``
``decode_head.{bottleneck,fpn_bottleneck,           the same, ``batch_norm`` -> ``bn``
lateral_convs.I,fpn_convs.I}.{conv,batch_norm}``
``decode_head.classifier``                          ``decode_head.conv_seg``
``auxiliary_head.{convs.I,conv_cat}.                ``auxiliary_head.0.{convs.I,conv_cat}.
{conv,batch_norm}``                                 {conv,bn}``
``auxiliary_head.classifier``                       ``auxiliary_head.0.conv_seg``
==================================================  =======================================

Dropped: ``backbone.swin.layernorm`` (transformers 5 files), the final norm of the
``SwinModel`` that ``SwinBackbone`` wraps and never applies (its outputs go through
``hidden_states_norms``). Origin option ``always_shift=True`` (``SwinBackbone`` runs its
Swin with ``always_partition=True``). The densevit model these files fit:
``SwinTransformer`` of the file's ``embed_dim``, ``depths``, ``num_heads``, ``window_size``,
``patch_size``, ``mlp_ratio``, ``out_indices=(0, 1, 2, 3)``; ``UPerHead(channels=
hidden_size, pool_scales=pool_scales, in_channels=[C, 2C, 4C, 8C])``; ``FCNHead(in_index=2,
in_channels=auxiliary_in_channels or 4C, channels=auxiliary_channels, num_convs=
auxiliary_num_convs, concat_input=auxiliary_concat_input)``, ``BN`` norms and
``align_corners=False`` (HF's). HF's heads have no dropout before the classifier
(``dropout_ratio=0`` for HF's training; eval is the same either way), and HF returns the
decode logits resized bilinearly to the input (densevit's ``predict`` / ``encode_decode``;
``mode='tensor'`` gives them at the head's stride 4). Proof:
``tests/models/test_upernet_vs_hf.py``. HF UperNet on ConvNeXt is not recognised (densevit
has no ConvNeXt).
"""
import re
from functools import partial

from .beit import split_class_entries
from .layout import MMSEG_HEAD, Layout, mmseg_head, prefixed_rules
from .mmseg_beit import MMSEG_BEIT
from .swin import HF_BACKBONE as HF_SWIN
from .swin import HF_IN_MODEL_DROP as HF_SWIN_IN_MODEL_DROP
from .swin import HF_IN_MODEL_RULES as HF_SWIN_IN_MODEL_RULES
from .swin import MMSEG as MMSEG_SWIN
from .swin import from_unfold_order

# every module of UPerHead and FCNHead with tensors (ConvModule: conv, norm), by name
_MODULES = (r'(?:psp_modules\.\d+\.1|bottleneck|lateral_convs\.\d+|fpn_convs\.\d+|'
            r'fpn_bottleneck|convs\.\d+|conv_cat)')
_HEAD_TENSORS = rf'((?:{_MODULES}\.(?:conv|bn)|conv_seg)\.\w+)'
_B = r'backbone\.'


def _mmseg_upernet(backbone, name, signature, post, neck_rules=()):
    """mmseg's UperNet on the backbone of the ``backbone`` layout: its keys under
    ``backbone.``, a neck's by ``neck_rules``, the heads' under their own names."""
    return Layout(
        f'MMSegmentation UperNet ({name})', signature,
        prefixed_rules(backbone.rules, _B, 'backbone.') + [
            *neck_rules,
            (MMSEG_HEAD + _HEAD_TENSORS, lambda m: f'{mmseg_head(m[1])}.{m[2]}'),
        ],
        drop={_B + pattern: reason for pattern, reason in backbone.drop.items()},
        post=post, options=dict(backbone.options))


UPERNET_SWIN = _mmseg_upernet(
    MMSEG_SWIN, 'Swin', r'^decode_head\.psp_modules\.\d+\.1\.conv\.weight$',
    partial(from_unfold_order, prefix='backbone.'))
# BEiT: Feature2Pyramid's learned parts (densevit's neck keeps mmseg's module names); the
# table split works on any prefix
UPERNET_BEIT = _mmseg_upernet(
    MMSEG_BEIT, 'BEiT', r'^backbone\.layers\.\d+\.gamma_1$', split_class_entries,
    [(r'neck\.((?:upsample_4x\.[013]|upsample_2x\.0)\.\w+)', r'neck.\1')])

# HF's heads: decode_head, and its one auxiliary head (no index)
_HF_HEAD = r'(decode_head|auxiliary_head)\.'

HF_UPERNET_SWIN = Layout(
    'Hugging Face UperNet (Swin)', r'^decode_head\.psp_modules\.\d+\.1\.batch_norm\.weight$',
    prefixed_rules(HF_SWIN_IN_MODEL_RULES, _B, 'backbone.') + [
        (_HF_HEAD + rf'({_MODULES})\.(conv|batch_norm)\.(\w+)',
         lambda m: f'{mmseg_head(m[1])}.{m[2]}.{"bn" if m[3] == "batch_norm" else m[3]}.{m[4]}'),
        (_HF_HEAD + r'classifier\.(weight|bias)', lambda m: f'{mmseg_head(m[1])}.conv_seg.{m[2]}'),
    ],
    drop={_B + pattern: reason for pattern, reason in HF_SWIN_IN_MODEL_DROP.items()},
    options=dict(HF_SWIN.options))


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`): none
    unless the backbone is mmseg's Swin or BEiT or HF's ``SwinBackbone``."""
    if any(re.match(_B + r'layers\.\d+\.gamma_1$', k) for k in state_dict):
        return [UPERNET_BEIT]
    if any(re.match(_B + r'stages\.\d+\.blocks\.\d+\.attn\.w_msa\.qkv\.weight$', k)
           for k in state_dict):
        return [UPERNET_SWIN]
    if any(re.match(_B + r'(?:swin\.)?encoder\.layers\.\d+\.blocks\.\d+\.layernorm_before\.'
                    r'weight$', k) for k in state_dict):
        return [HF_UPERNET_SWIN]
    return []
