"""Whole UperNet segmentors from MMSegmentation 1.x -> densevit's ``EncoderDecoder`` with a
``UPerHead`` and ``FCNHead`` auxiliary heads.

mmseg's Swin model zoo (``configs/swin/swin-{tiny,small,base,...}-..._upernet_8xb2-160k_
ade20k-512x512``) is UperNet on a Swin backbone, with one ``FCNHead`` on stage 3 as the
auxiliary head (a dict in the config: keys ``auxiliary_head.*`` without an index).

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
Swin shifts every second block whatever the map size). Other mmseg UperNet backbones
(ResNet-V1c, ViT with its multi-level neck, ConvNeXt, BEiT, ...) are not recognised here.
"""
import re
from functools import partial

from .layout import MMSEG_HEAD, Layout, mmseg_head, prefixed_rules
from .swin import MMSEG as MMSEG_SWIN
from .swin import from_unfold_order

# every module of UPerHead and FCNHead with tensors (ConvModule: conv, bn), and the classifier
_HEAD_TENSORS = (r'((?:(?:psp_modules\.\d+\.1|bottleneck|lateral_convs\.\d+|fpn_convs\.\d+|'
                 r'fpn_bottleneck|convs\.\d+|conv_cat)\.(?:conv|bn)|conv_seg)\.\w+)')
_B = r'backbone\.'

UPERNET_SWIN = Layout(
    'MMSegmentation UperNet (Swin)', r'^decode_head\.psp_modules\.\d+\.1\.conv\.weight$',
    prefixed_rules(MMSEG_SWIN.rules, _B, 'backbone.') + [
        (MMSEG_HEAD + _HEAD_TENSORS, lambda m: f'{mmseg_head(m[1])}.{m[2]}'),
    ],
    drop={_B + pattern: reason for pattern, reason in MMSEG_SWIN.drop.items()},
    post=partial(from_unfold_order, prefix='backbone.'), options=dict(MMSEG_SWIN.options))


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`): none
    unless the backbone is mmseg's Swin."""
    if not any(re.match(_B + r'stages\.\d+\.blocks\.\d+\.attn\.w_msa\.qkv\.weight$', k)
               for k in state_dict):
        return []
    return [UPERNET_SWIN]
