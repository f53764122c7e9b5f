"""Swin checkpoints (official repo, timm, Hugging Face) -> densevit's :class:`SwinTransformer`.

Layouts recognised from the keys:

- official (microsoft/Swin-Transformer; also densevit's own):
  ``layers.N.blocks.M.attn.qkv`` ([3C, C]), ``attn.relative_position_bias_table``
  ([(2W-1)^2, heads] for window W), ``layers.N.downsample.{norm,reduction}``
  (merging at the END of stage N), ``patch_embed.{proj,norm}``, ``norm`` (final),
  ``head``.
- timm >= 0.9: as official, but merging sits at the START of the next stage
  (``layers.N+1.downsample``), and the head is ``head.fc``.
- Hugging Face ``SwinModel`` / ``SwinForImageClassification`` (``swin.``) /
  ``SwinBackbone`` (``swin.`` + ``hidden_states_norms.stageK``), both the Hub
  file layout (``attention.self.query``, ``intermediate.dense`` ...) and the
  transformers-5 module layout (``attention.q_proj``, ``mlp.fc1`` ...).

Patch merging: all three concatenate the 2x2 neighbours in the same order,
(row, col) = (0, 0), (1, 0), (0, 1), (1, 1) (checked against HF's code and
its outputs in tests/models/test_swin.py), so ``reduction`` and ``norm``
weights ([2C, 4C] and [4C]) are copied unpermuted.

The classification model's final ``norm`` / HF ``layernorm`` normalises the
last stage's output, which is what densevit's ``norm{last}`` does, so it maps
there; norms of earlier outputs are new in a dense backbone. Bias tables made
for another window are resized when loaded (see ``RelativePositionBias`` in
``densevit/models/layers/relative_position.py``).
"""
import re
from collections import OrderedDict

from mmengine.logging import print_log

from .layout import Layout, convert_state_dict

_BLOCK = r'layers\.(\d+)\.blocks\.(\d+)\.'
_OURS_BLOCK = r'layers.\1.blocks.\2.'
_BIAS_TABLE = 'attn.relative_position_bias.relative_position_bias_table'
_LAST = '{last}'  # stage index of the final norm, filled in once the stages are counted

_DROP_COMMON = {
    r'.*relative_position_index': 'derived from the window size, rebuilt by the model',
    r'.*attn_mask': 'derived from the input size, rebuilt at every forward',
    r'head(\..*)?': 'ImageNet classification head (not part of a backbone)',
}


def _official_rules(downsample_shift):
    def downsample(m):
        return f'layers.{int(m[1]) - downsample_shift}.downsample.{m[2]}'
    return [
        (r'patch_embed\.(proj|norm)\.(weight|bias)', r'patch_embed.\1.\2'),
        (r'absolute_pos_embed(\.weight)?', 'absolute_pos_embed.weight'),
        (_BLOCK + r'attn\.relative_position_bias_table', _OURS_BLOCK + _BIAS_TABLE),
        (_BLOCK + r'attn\.relative_position_bias\.relative_position_bias_table',
         _OURS_BLOCK + _BIAS_TABLE),
        (_BLOCK + r'(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)',
         _OURS_BLOCK + r'\3.\4'),
        (r'layers\.(\d+)\.downsample\.((?:norm|reduction)\.(?:weight|bias))', downsample),
        (r'norm\.(weight|bias)', r'norm{last}.\1'),
        (r'norm(\d+)\.(weight|bias)', r'norm\1.\2'),
    ]


OFFICIAL = Layout('official Swin', r'^layers\.\d+\.blocks\.\d+\.attn\.qkv\.weight$',
                  _official_rules(0), drop=dict(_DROP_COMMON))
TIMM = Layout('timm Swin', r'^layers\.\d+\.blocks\.\d+\.attn\.qkv\.weight$',
              _official_rules(1), drop=dict(_DROP_COMMON))

_QKV = {'query': 'q', 'key': 'k', 'value': 'v', 'q_proj': 'q', 'k_proj': 'k', 'v_proj': 'v'}
_HF = r'(?:swin\.)?'
_HF_BLOCK = _HF + r'encoder\.' + _BLOCK
HF = Layout(
    'Hugging Face Swin', r'(^|\.)encoder\.layers\.\d+\.blocks\.\d+\.(attention|layernorm_before)',
    [
        (_HF + r'embeddings\.patch_embeddings\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
        (_HF + r'embeddings\.norm\.(weight|bias)', r'patch_embed.norm.\1'),
        (_HF + r'embeddings\.position_embeddings', 'absolute_pos_embed.weight'),
        (_HF_BLOCK + r'attention\.(?:self\.)?(query|key|value|q_proj|k_proj|v_proj)\.(weight|bias)',
         lambda m: f'layers.{m[1]}.blocks.{m[2]}.attn.qkv.{m[4]}@{_QKV[m[3]]}'),
        (_HF_BLOCK + r'attention\.(?:output\.dense|o_proj)\.(weight|bias)',
         _OURS_BLOCK + r'attn.proj.\3'),
        (_HF_BLOCK + r'attention\.(?:self\.|relative_position_bias\.)relative_position_bias_table',
         _OURS_BLOCK + _BIAS_TABLE),
        (_HF_BLOCK + r'layernorm_before\.(weight|bias)', _OURS_BLOCK + r'norm1.\3'),
        (_HF_BLOCK + r'layernorm_after\.(weight|bias)', _OURS_BLOCK + r'norm2.\3'),
        (_HF_BLOCK + r'(?:intermediate\.dense|mlp\.fc1)\.(weight|bias)',
         _OURS_BLOCK + r'mlp.fc1.\3'),
        (_HF_BLOCK + r'(?:output\.dense|mlp\.fc2)\.(weight|bias)',
         _OURS_BLOCK + r'mlp.fc2.\3'),
        (_HF + r'encoder\.layers\.(\d+)\.downsample\.(norm|reduction)\.(weight|bias)',
         r'layers.\1.downsample.\2.\3'),
        (_HF + r'layernorm\.(weight|bias)', r'norm{last}.\1'),
        # SwinBackbone: one norm per output stage; stageK is the output of stage K-1
        (r'hidden_states_norms\.stage(\d+)\.(weight|bias)',
         lambda m: f'norm{int(m[1]) - 1}.{m[2]}'),
    ],
    drop={
        r'.*relative_position_index': 'derived from the window size, rebuilt by the model',
        r'classifier\..*': 'ImageNet classification head (not part of a backbone)',
        _HF + r'pooler\..*': 'pooling layer (not part of a backbone)',
        _HF + r'embeddings\.mask_token': 'SimMIM mask token (pre-training only)',
        r'decoder\..*': 'SimMIM decoder (pre-training only)',
    })


def _fill_final_norm(state_dict):
    """Put the classifier's final norm at ``norm{last stage}``, unless that stage has its own."""
    stages = [int(m[1]) for k in state_dict for m in [re.match(r'layers\.(\d+)\.', k)] if m]
    last = str(max(stages, default=3))
    out = OrderedDict()
    for k, v in state_dict.items():
        if _LAST not in k:
            out[k] = v
            continue
        new = k.replace(_LAST, last)
        if new in state_dict:  # e.g. SwinBackbone: its per-stage norm is the one its outputs use
            print_log(f'Swin: dropped the final norm ({k.replace(_LAST, "")}): the checkpoint '
                      f'has its own output norm for stage {last}', logger='current')
        else:
            out[new] = v
    return out


OFFICIAL.post = TIMM.post = HF.post = _fill_final_norm


def convert_swin(state_dict, strict=False):
    """Convert a Swin checkpoint's ``state_dict`` to densevit's key layout.

    Args:
        state_dict (dict): official / timm / HF Swin (or densevit) tensors.
        strict (bool): raise on keys no rule explains (else kept, and reported
            as unexpected when loaded).

    Returns:
        OrderedDict for :class:`~densevit.models.backbones.swin.SwinTransformer`.

    Raises:
        ValueError: the keys match no Swin layout (the first keys are listed).
    """
    keys = list(state_dict)
    # timm moved patch merging to the start of the next stage: no stage 0 merging.
    timm = (any(re.match(r'layers\.\d+\.downsample\.', k) for k in keys)
            and not any(k.startswith('layers.0.downsample.') for k in keys))
    return convert_state_dict(state_dict, [TIMM if timm else OFFICIAL, HF], 'Swin', strict)
