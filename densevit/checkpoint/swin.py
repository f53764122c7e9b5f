"""Swin checkpoints (official repo, timm, Hugging Face, MMSegmentation) -> densevit's
:class:`SwinTransformer`.

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
- MMSegmentation 1.x ``SwinTransformer`` (mmseg/models/backbones/swin.py; the
  same layout as MMDetection 3.x's): a whole segmentor's ``backbone.*`` (load
  with ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``)
  or mmseg's ImageNet files (``swin_tiny_patch4_window7_224_20220317-*.pth``,
  written by its tools/model_converters/swin2mmseg.py from the official ones,
  keys without ``backbone.``). With ``S.`` = ``stages.N.blocks.M.`` and
  ``L.`` = ``layers.N.blocks.M.``:

  - ``patch_embed.projection.*`` -> ``patch_embed.proj.*``; ``patch_embed.norm.*`` as is
  - ``absolute_pos_embed`` [1, N, C] -> ``absolute_pos_embed.weight``
  - ``S.norm1.*``, ``S.norm2.*`` -> ``L.norm1.*``, ``L.norm2.*``
  - ``S.attn.w_msa.qkv.*``, ``S.attn.w_msa.proj.*`` -> ``L.attn.qkv.*``, ``L.attn.proj.*``
  - ``S.attn.w_msa.relative_position_bias_table`` ->
    ``L.attn.relative_position_bias.relative_position_bias_table``
  - ``S.ffn.layers.0.0.*`` -> ``L.mlp.fc1.*``; ``S.ffn.layers.1.*`` -> ``L.mlp.fc2.*``
  - ``stages.N.downsample.{norm,reduction}.*`` -> ``layers.N.downsample.*`` (permuted)
  - ``normK.*`` (output norms, whole-model files) -> ``normK.*``

  Not renamings, each checked in mmseg 1.2.2's source:

  * merging sits at the END of stage N (``SwinBlockSequence.downsample``), as official;
  * patch merging gathers the 2x2 neighbours with ``nn.Unfold`` (mmseg/models/utils/
    embed.py ``PatchMerging``), so its 4C input channels are in unfold order,
    index ``c * 4 + 2 * dy + dx``, against densevit's (and official) concatenation
    ``j * C + c`` with j over (dy, dx) = (0, 0), (1, 0), (0, 1), (1, 1): not a
    permutation of 4 blocks but of all 4C channels. ``reduction.weight``
    [2C, 4C] (its columns) and ``norm.{weight,bias}`` [4C] are re-indexed
    (:func:`from_unfold_order`; swin2mmseg.py applies the forward map);
  * ``relative_position_index`` (a saved buffer; built by another formula, the
    same index) and the ImageNet files' ``attn_mask`` buffers are dropped;
  * the ImageNet files' final ``norm`` is dropped: mmseg's SwinTransformer has no
    module of that name and its loader ignores it, so its output norms
    ``norm0..3`` start as identity; densevit's do too (reported at INFO);
  * LayerNorm eps is 1e-5 (mmcv's ``build_norm_layer`` default), as official,
    timm and HF (``layer_norm_eps=1e-5``): no option needed.

Patch merging: official, timm and HF concatenate the 2x2 neighbours in the same
order, (row, col) = (0, 0), (1, 0), (0, 1), (1, 1) (checked against HF's code and
its outputs in tests/models/test_swin.py), so their ``reduction`` and ``norm``
weights ([2C, 4C] and [4C]) are copied unpermuted.

The classification model's final ``norm`` / HF ``layernorm`` normalises the
last stage's output, which is what densevit's ``norm{last}`` does, so it maps
there; norms of earlier outputs are new in a dense backbone. Bias tables made
for another window are resized when loaded (see ``RelativePositionBias`` in
``densevit/models/layers/relative_position.py``).

Origin options (``Layout.options``, compared with ``SwinTransformer.always_shift``):
the classifiers (official ``SwinTransformerBlock`` and timm: no shift when the
training-size map is <= the window; HF ``SwinModel``: ``set_shift_and_window_size``,
the same at run time) give ``always_shift=False``; MMSegmentation
(``SwinBlock(shift=i % 2 == 1)``, no size test) and HF ``SwinBackbone``
(``always_partition=True``) give ``always_shift=True``; densevit's own files none.
"""
import re
from collections import OrderedDict

from mmengine.logging import print_log

from .layout import Layout, UnknownLayoutError, convert_state_dict

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


_CLASSIFIER = {'always_shift': False}  # no shift where the map fits in a window
_DENSE = {'always_shift': True}

_OFFICIAL_SIGNATURE = r'^layers\.\d+\.blocks\.\d+\.attn\.qkv\.weight$'
OFFICIAL = Layout('official Swin', _OFFICIAL_SIGNATURE, _official_rules(0),
                  drop=dict(_DROP_COMMON), options=_CLASSIFIER)
TIMM = Layout('timm Swin', _OFFICIAL_SIGNATURE, _official_rules(1), drop=dict(_DROP_COMMON),
              options=_CLASSIFIER)
DENSEVIT = Layout('densevit Swin', _OFFICIAL_SIGNATURE, _official_rules(0),
                  drop=dict(_DROP_COMMON))  # made with whatever always_shift its config had

_MM_BLOCK = r'stages\.(\d+)\.blocks\.(\d+)\.'
MMSEG = Layout(
    'MMSegmentation Swin', r'^stages\.\d+\.blocks\.\d+\.attn\.w_msa\.qkv\.weight$',
    [
        (r'patch_embed\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
        (r'patch_embed\.norm\.(weight|bias)', r'patch_embed.norm.\1'),
        (r'absolute_pos_embed', 'absolute_pos_embed.weight'),
        (_MM_BLOCK + r'(norm1|norm2)\.(weight|bias)', _OURS_BLOCK + r'\3.\4'),
        (_MM_BLOCK + r'attn\.w_msa\.(qkv|proj)\.(weight|bias)', _OURS_BLOCK + r'attn.\3.\4'),
        (_MM_BLOCK + r'attn\.w_msa\.relative_position_bias_table', _OURS_BLOCK + _BIAS_TABLE),
        (_MM_BLOCK + r'ffn\.layers\.0\.0\.(weight|bias)', _OURS_BLOCK + r'mlp.fc1.\3'),
        (_MM_BLOCK + r'ffn\.layers\.1\.(weight|bias)', _OURS_BLOCK + r'mlp.fc2.\3'),
        (r'stages\.(\d+)\.downsample\.(norm|reduction)\.(weight|bias)',
         r'layers.\1.downsample.\2.\3'),
        (r'norm(\d+)\.(weight|bias)', r'norm\1.\2'),
    ],
    drop={
        r'.*relative_position_index': 'derived from the window size, rebuilt by the model',
        r'stages\..*\.attn_mask': 'derived from the input size, rebuilt at every forward',
        r'norm\.(weight|bias)': "the classifier's final norm, which MMSegmentation's Swin leaves "
                                'unused (its output norms start as identity, as here)',
        r'head(\..*)?': 'ImageNet classification head (not part of a backbone)',
    },
    options=_DENSE)


def from_unfold_order(state_dict, prefix=''):
    """Patch-merging weights from mmseg's unfold channel order to the concatenation order.

    mmseg's 4C merged channels are ``c * 4 + k`` with k = 2 * dy + dx (``nn.Unfold``
    over 2x2); ours ``j * C + c`` with j over (dy, dx) = (0, 0), (1, 0), (0, 1),
    (1, 1), i.e. k = (0, 2, 1, 3)[j]. ``reduction.weight`` [2C, 4C] is re-indexed
    along its columns, ``norm.{weight,bias}`` [4C] alike. ``prefix``: where the
    backbone's keys are (``'backbone.'`` in a whole model).
    """
    merging = (re.escape(prefix)
               + r'layers\.\d+\.downsample\.(reduction\.weight|norm\.(weight|bias))')
    out = OrderedDict()
    for k, v in state_dict.items():
        if re.fullmatch(merging, k):
            lead = v.shape[:-1]
            v = v.reshape(*lead, -1, 4)[..., [0, 2, 1, 3]].transpose(-1, -2).reshape(*lead, -1)
        out[k] = v
    return out


MMSEG.post = from_unfold_order

_QKV = {'query': 'q', 'key': 'k', 'value': 'v', 'q_proj': 'q', 'k_proj': 'k', 'v_proj': 'v'}
_HF = r'(?:swin\.)?'
_HF_BLOCK = _HF + r'encoder\.' + _BLOCK
_HF_RULES = dict(
    signature=r'(^|\.)encoder\.layers\.\d+\.blocks\.\d+\.(attention|layernorm_before)',
    rules=[
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
HF = Layout('Hugging Face Swin', **_HF_RULES, options=_CLASSIFIER)  # SwinModel, ...Classification
HF_BACKBONE = Layout('Hugging Face SwinBackbone', **_HF_RULES, options=_DENSE)
# a SwinBackbone inside a whole model (HF UperNet, Mask2Former): the final norm of the
# SwinModel it wraps is dropped, not mapped (SwinBackbone never applies it: its outputs go
# through hidden_states_norms)
HF_IN_MODEL_RULES = [(p, r) for p, r in HF_BACKBONE.rules if not re.fullmatch(p, 'layernorm.weight')]
HF_IN_MODEL_DROP = {
    _HF + r'layernorm\.(?:weight|bias)': "the final norm of the SwinModel inside HF's "
                                          'SwinBackbone, which it never applies (its outputs '
                                          'go through hidden_states_norms)',
    **HF_BACKBONE.drop}


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


OFFICIAL.post = TIMM.post = DENSEVIT.post = HF.post = HF_BACKBONE.post = _fill_final_norm


def convert_swin(state_dict, strict=False):
    """Convert a Swin checkpoint's ``state_dict`` to densevit's key layout.

    Args:
        state_dict (dict): official / timm / HF / MMSegmentation Swin (or densevit)
            tensors.
        strict (bool): raise on keys no rule explains (else kept, and reported
            as unexpected when loaded).

    Returns:
        Converted: for :class:`~densevit.models.backbones.swin.SwinTransformer`,
        with the origin's ``layout`` name and ``options`` (``always_shift``).

    Raises:
        UnknownLayoutError: the keys match no Swin layout (the first keys are listed; keys
            under ``backbone.`` get a hint to set ``prefix``).
    """
    keys = list(state_dict)
    # timm moved patch merging to the start of the next stage: no stage 0 merging.
    timm = (any(re.match(r'layers\.\d+\.downsample\.', k) for k in keys)
            and not any(k.startswith('layers.0.downsample.') for k in keys))
    # densevit's own names: the nested bias table, or per-stage output norms
    ours = any(re.search(r'\.attn\.relative_position_bias\.relative_position_bias_table$', k)
               or re.fullmatch(r'norm\d+\.weight', k) for k in keys)
    official = TIMM if timm else DENSEVIT if ours else OFFICIAL
    hf = HF_BACKBONE if any(k.startswith('hidden_states_norms.') for k in keys) else HF
    try:
        return convert_state_dict(state_dict, [official, hf, MMSEG], 'Swin', strict)
    except UnknownLayoutError as e:
        if any(k.startswith('backbone.') for k in keys):
            raise UnknownLayoutError(
                f"{e}. These keys start with 'backbone.': a whole model's checkpoint; load its "
                f"backbone with init_cfg=dict(type='Pretrained', checkpoint=..., "
                f"prefix='backbone.')") from None
        raise
