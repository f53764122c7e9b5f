"""Whole DETR panoptic checkpoints (Hugging Face ``DetrForSegmentation``, the official
``DETRsegm``) -> densevit's :class:`~densevit.models.detectors.detr_panoptic.DETRPanoptic`
with a ``DETRMaskHead``.

Both wrap a whole DETR under ``detr.`` (its keys converted by :mod:`densevit.checkpoint.detr`'s
Hugging Face or official rules) and add the mask head's two parts:

- the attention maps: ``bbox_attention.{q,k}_proj`` (transformers 5) or ``{q,k}_linear``
  (Hub files, official) -> ``mask_head.attention.{q,k}_proj``;
- the convolutional decoder, as transformers 5 / as Hub and official files name it ->
  ``mask_head.decoder.``:

  ======================================================  ===========================
  ``mask_head.conv1.{conv,norm}`` / ``lay1``, ``gn1``       ``stem.0.{conv,norm}``
  ``mask_head.conv2.{conv,norm}`` / ``lay2``, ``gn2``       ``stem.1.{conv,norm}``
  ``mask_head.fpn_stages.i.fpn_adapter`` / ``adapter{i+1}``  ``adapters.i``
  ``mask_head.fpn_stages.i.refine.{conv,norm}`` /           ``fuse.i.{conv,norm}``
  ``lay{i+3}``, ``gn{i+3}``
  ``mask_head.output_conv`` / ``out_lay``                   ``out_conv``
  ======================================================  ===========================

Every tensor is copied unchanged: the modules compute the same functions (3x3 convolutions
with bias, GroupNorm, 1x1 adapters, the attention's linear projections; proven in
``tests/models/test_detr_panoptic_vs_hf.py``). The fusion stages' count follows the file
(three for ResNet's strides 16, 8, 4).
"""
from .detr import HF, OFFICIAL
from .layout import Layout, convert_state_dict, prefixed_rules
from .resnet import convert_hf_resnet_backbone

_LEAF = r'(weight|bias)'
# the decoder's parts: transformers-5 names and the Hub / official ones -> ours
_DECODER = {'conv1.conv': 'stem.0.conv', 'conv1.norm': 'stem.0.norm', 'lay1': 'stem.0.conv',
            'gn1': 'stem.0.norm', 'conv2.conv': 'stem.1.conv', 'conv2.norm': 'stem.1.norm',
            'lay2': 'stem.1.conv', 'gn2': 'stem.1.norm', 'output_conv': 'out_conv',
            'out_lay': 'out_conv'}
for _i in range(3):
    _DECODER.update({f'fpn_stages.{_i}.fpn_adapter': f'adapters.{_i}',
                     f'adapter{_i + 1}': f'adapters.{_i}',
                     f'fpn_stages.{_i}.refine.conv': f'fuse.{_i}.conv',
                     f'fpn_stages.{_i}.refine.norm': f'fuse.{_i}.norm',
                     f'lay{_i + 3}': f'fuse.{_i}.conv', f'gn{_i + 3}': f'fuse.{_i}.norm'})
_NAMES = '|'.join(n.replace('.', r'\.') for n in sorted(_DECODER, key=len, reverse=True))

MASK_HEAD_RULES = [
    (r'bbox_attention\.(q|k)_(?:proj|linear)\.' + _LEAF, r'mask_head.attention.\1_proj.\2'),
    (rf'mask_head\.({_NAMES})\.' + _LEAF,
     lambda m: f'mask_head.decoder.{_DECODER[m[1]]}.{m[2]}'),
]

HF_PANOPTIC = Layout(
    'Hugging Face DETR panoptic',
    r'^detr\.(?:model\.)?encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)\.',
    prefixed_rules(HF.rules, r'detr\.', '') + MASK_HEAD_RULES,
    post=convert_hf_resnet_backbone)

OFFICIAL_PANOPTIC = Layout(
    'official DETR panoptic',
    r'^detr\.transformer\.encoder\.layers\.\d+\.self_attn\.in_proj_weight$',
    prefixed_rules(OFFICIAL.rules, r'detr\.', '') + MASK_HEAD_RULES)


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    return [HF_PANOPTIC, OFFICIAL_PANOPTIC]


def convert_detr_panoptic(state_dict, strict=False):
    """Convert an HF ``DetrForSegmentation`` or official ``DETRsegm`` checkpoint to
    ``DETRPanoptic``'s keys (``strict``: as
    :func:`~densevit.checkpoint.layout.convert_state_dict`)."""
    return convert_state_dict(state_dict, [HF_PANOPTIC, OFFICIAL_PANOPTIC], 'DETR panoptic',
                              strict)
