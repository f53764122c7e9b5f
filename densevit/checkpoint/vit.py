"""ViT checkpoints (timm incl. DeiT / AugReg / MAE, Hugging Face incl. ViTMAE, MMSegmentation,
densevit's own MAE and whole models) -> densevit's :class:`VisionTransformer`.

Layouts recognised from the keys:

- timm (and densevit's own): ``patch_embed.proj``, ``cls_token``, ``pos_embed``
  [1, 1 + h*w, D], ``blocks.N.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``,
  ``norm``, ``head``. The same layout serves AugReg (timm's converted JAX
  weights), DeiT and MAE, with these differences:

  * DeiT distilled: a second extra token ``dist_token`` (its row is the
    second of ``pos_embed``) and ``head_dist``. densevit's ViT has one class
    token, so both the token and its position row are dropped (logged); the
    remaining weights are the model's, but it was trained seeing that token.
  * official MAE pre-training (facebookresearch/mae ``models_mae.py``, layout
    ``official MAE``): the encoder as timm's (its ``pos_embed`` a stored fixed 2-d
    sin-cos table, loaded into the learned table), plus the decoder (``decoder_embed``,
    ``decoder_pos_embed``, ``decoder_blocks.N.*``, ``decoder_norm``, ``decoder_pred``)
    and ``mask_token``: dropped, with a logged count. LayerNorm eps 1e-6.
  * MAE / global-pool fine-tuned: no final ``norm`` (an Identity in timm);
    ``fc_norm`` normalises the *pooled* feature instead, so it is dropped,
    not mapped onto the per-token final norm. Build such backbones with
    ``final_norm=False``.

- Hugging Face ``ViTModel`` / ``ViTForImageClassification`` (``vit.``), both the
  Hub file layout (``encoder.layer.N.attention.attention.{query,key,value}``,
  ``attention.output.dense``, ``intermediate.dense``, ``output.dense``,
  ``layernorm_before/after``, ``layernorm``) and the transformers-5 module
  layout (``layers.N.attention.{q,k,v,o}_proj``, ``mlp.fc1/fc2``). q, k and v
  ([D, D] each) are concatenated into ``qkv`` ([3D, D], q-k-v order). HF ViT's
  LayerNorm eps is 1e-12: the layout's options set ``layer_norm_eps=1e-12`` on the
  backbone (``Layout.options``, compared with ``VisionTransformer.layer_norm_eps``; timm and
  mmseg: 1e-6).
  ``ViTMAEModel`` has exactly these keys; ``ViTMAEForPreTraining`` (layout ``Hugging
  Face ViTMAE``) has them under ``vit.`` and its decoder under ``decoder.``
  (``decoder_embed``, ``mask_token``, ``decoder_pos_embed``, ``decoder_layers.N.*``,
  ``decoder_norm``, ``decoder_pred``): dropped, with a logged count. Its position table
  is fixed sin-cos but stored, as the official one.

- Hugging Face DINOv2, with or without registers: :mod:`densevit.checkpoint.dinov2`.

- Hugging Face DINOv3 (``DINOv3ViTModel``, ``DINOv3ViTBackbone``):
  :mod:`densevit.checkpoint.dinov3`.

- Hugging Face ViTDet (``VitDetModel``, ``VitDetBackbone``): :mod:`densevit.checkpoint.vitdet`;
  SAM's image encoder (``SamVisionModel``, ``SamModel``): :mod:`densevit.checkpoint.sam`.

- Hugging Face BEiT and Data2VecVision (``BeitModel``, ``BeitBackbone``,
  ``Data2VecVisionModel`` and the whole models nesting them): :mod:`densevit.checkpoint.beit`;
  CLIP's image tower (``CLIPVisionModel``, a whole ``CLIPModel``):
  :mod:`densevit.checkpoint.clip`.

- densevit's own checkpoints with the ViT under ``backbone.`` (mmengine's ``state_dict``):
  ``backbone.X`` -> ``X`` by the timm rules; everything else dropped with a logged count,
  as the ``densevit MAE`` layout (a pre-training model: decoder under ``neck.`` /
  ``decoder.``, ``head.*``, ``mask_token``) or, when ``bbox_head.`` / ``decode_head.`` /
  ``auxiliary_head.`` keys are there, the ``densevit detector / segmentor (its
  backbone)`` layout (:func:`densevit_model_layout`).

- MMSegmentation 1.x ``VisionTransformer`` (``mmseg/models/backbones/vit.py``), e.g. a
  SETR checkpoint with ``prefix='backbone.'``:

  ================================================  ====================================
  mmseg                                             densevit
  ================================================  ====================================
  ``patch_embed.projection.weight`` [D, C, P, P]    ``patch_embed.proj.weight``
  ``patch_embed.projection.bias`` (if any)          ``patch_embed.proj.bias``
  ``cls_token`` [1, 1, D]                           ``cls_token``
  ``pos_embed`` [1, 1 + h*w, D]                     ``pos_embed.weight``
  ``layers.N.ln1`` / ``ln2``                        ``blocks.N.norm1`` / ``norm2``
  ``layers.N.attn.attn.in_proj_weight`` [3D, D]     ``blocks.N.attn.qkv.weight``
  ``layers.N.attn.attn.in_proj_bias`` [3D]          ``blocks.N.attn.qkv.bias``
  ``layers.N.attn.attn.out_proj``                   ``blocks.N.attn.proj``
  ``layers.N.ffn.layers.0.0`` (Linear D -> F)       ``blocks.N.mlp.fc1``
  ``layers.N.ffn.layers.1`` (Linear F -> D)         ``blocks.N.mlp.fc2``
  ``ln1`` (final norm, only with ``final_norm``)    ``norm``
  ================================================  ====================================

  Facts beyond renaming (checked in mmseg 1.2.2's ``vit.py`` and mmcv's
  ``MultiheadAttention`` / ``FFN``):

  * ``in_proj_weight`` is ``nn.MultiheadAttention``'s packed q, k, v ([3D, D], q-k-v
    order, heads contiguous within each), the layout of densevit's ``qkv``.
  * the patch convolution has no bias by default (``patch_bias=False``): a zero
    ``patch_embed.proj.bias`` is added.
  * ``cls_token`` and the class-token row of ``pos_embed`` exist even with
    ``with_cls_token=False`` (the row is added to the token, which is removed before
    the first layer); a densevit ViT without class token drops both on load
    (``VisionTransformer._load_from_state_dict``): the same patch tokens.
  * the final norm is ``ln1`` (``build_norm_layer`` with postfix 1), absent with the
    default ``final_norm=False`` (SETR): build densevit's ViT with ``final_norm=False``.
  * the table is made for ``img_size`` and resized to each input's grid
    (``interpolate_mode``, ``align_corners=False``), as densevit does.
  * LayerNorm eps comes from ``norm_cfg``: mmseg's ViT configs (SETR, UPerNet) give
    1e-6, which the layout's options set (mmcv's bare ``dict(type='LN')`` is 1e-5).
  * ``patch_norm`` / ``pre_norm`` variants (``patch_embed.norm``, ``pre_ln``) have no
    densevit counterpart: their keys stay unexplained (a strict load refuses them).

Position tables made for another grid are resized when loaded (see
``LearnedPositionEmbedding`` in ``densevit/models/layers/pos_embed.py``).
"""
import math
import re

from mmengine.logging import print_log

from . import beit, clip, dinov2, dinov3, sam, vitdet
from .layout import Layout, convert_state_dict, hf_vit_drop, hf_vit_layer_rules, hf_vit_rules
from .match import CheckpointMismatchError

_BLOCK_PARTS = r'(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)'

TIMM = Layout(
    'timm ViT', r'^blocks\.\d+\.attn\.qkv\.weight$',
    [
        (r'patch_embed\.proj\.(weight|bias)', r'patch_embed.proj.\1'),
        (r'cls_token', 'cls_token'),
        (r'dist_token', 'dist_token'),  # removed with its position row in _drop_dist_token
        (r'pos_embed', 'pos_embed.weight'),
        (r'pos_embed\.(.+)', r'pos_embed.\1'),  # densevit's own position modules
        (r'blocks\.(\d+)\.' + _BLOCK_PARTS + r'\.(weight|bias)', r'blocks.\1.\2.\3'),
        (r'blocks\.(\d+)\.(ls1|ls2)\.gamma', r'blocks.\1.\2.gamma'),  # LayerScale
        (r'blocks\.(\d+)\.attn\.([qkv])_bias', r'blocks.\1.attn.\2_bias'),  # per-part biases
        # densevit's ViTDet / SAM options: decomposed relative positions, residual blocks
        (r'blocks\.(\d+)\.attn\.(rel_pos_[hw])', r'blocks.\1.attn.\2'),
        (r'blocks\.(\d+)\.residual\.((?:conv|norm)[123])\.(weight|bias)',
         r'blocks.\1.residual.\2.\3'),
        (r'register_tokens', 'register_tokens'),  # densevit's own registers
        (r'norm\.(weight|bias)', r'norm.\1'),
        (r'pre_norm\.(weight|bias)', r'pre_norm.\1'),  # densevit's own (CLIP's pre-norm)
        (r'stem\.(.+)', r'stem.\1'),  # densevit's hybrid CNN stem
    ],
    drop={
        r'head\..*': 'ImageNet classification head (not part of a backbone)',
        r'head_dist\..*': 'DeiT distillation head (not part of a backbone)',
        r'pre_logits\..*': 'pre-logits layer of the classifier (not part of a backbone)',
        r'fc_norm\..*': 'norm of the pooled feature (global-pool / MAE fine-tuned classifier), '
                        'not a per-token norm; use final_norm=False for such checkpoints',
    },
    options={'layer_norm_eps': 1e-6})

_HF = r'(?:vit\.)?'
_HF_LAYER = _HF + r'(?:encoder\.layer|layers)\.(\d+)\.'
HF = Layout(
    'Hugging Face ViT', r'(^|\.)(encoder\.layer|layers)\.\d+\.(attention|layernorm_before)',
    [
        *hf_vit_rules(_HF),
        *hf_vit_layer_rules(_HF_LAYER),
    ],
    drop={
        _HF + r'pooler\..*': 'pooler (tanh layer on the class token, classification only)',
        **hf_vit_drop(_HF),
    },
    options={'layer_norm_eps': 1e-12})

_MM_LAYER = r'layers\.(\d+)\.'
MMSEG_RULES = [
    (r'patch_embed\.projection\.(weight|bias)', r'patch_embed.proj.\1'),
    (r'cls_token', 'cls_token'),
    (r'pos_embed', 'pos_embed.weight'),
    (_MM_LAYER + r'ln(1|2)\.(weight|bias)', r'blocks.\1.norm\2.\3'),
    (_MM_LAYER + r'attn\.attn\.in_proj_(weight|bias)', r'blocks.\1.attn.qkv.\2'),
    (_MM_LAYER + r'attn\.attn\.out_proj\.(weight|bias)', r'blocks.\1.attn.proj.\2'),
    (_MM_LAYER + r'ffn\.layers\.0\.0\.(weight|bias)', r'blocks.\1.mlp.fc1.\2'),
    (_MM_LAYER + r'ffn\.layers\.1\.(weight|bias)', r'blocks.\1.mlp.fc2.\2'),
    (r'ln1\.(weight|bias)', r'norm.\1'),
]


def add_patch_bias(state_dict, prefix=''):
    """mmseg's patch convolution has no bias (``patch_bias=False``): add a zero one [D]."""
    weight = state_dict.get(prefix + 'patch_embed.proj.weight')
    if weight is not None and prefix + 'patch_embed.proj.bias' not in state_dict:
        state_dict[prefix + 'patch_embed.proj.bias'] = weight.new_zeros(weight.shape[0])
    return state_dict


MMSEG = Layout('MMSegmentation ViT', r'^layers\.\d+\.attn\.attn\.in_proj_weight$', MMSEG_RULES,
               post=add_patch_bias, options={'layer_norm_eps': 1e-6})


def _drop_dist_token(state_dict):
    """DeiT distilled: remove ``dist_token`` and its row (the second) of the position table."""
    if 'dist_token' not in state_dict:
        return state_dict
    state_dict.pop('dist_token')
    table = state_dict.get('pos_embed.weight')
    if table is not None:
        state_dict['pos_embed.weight'] = table[:, [0] + list(range(2, table.shape[1]))]
    print_log('ViT: dropped DeiT dist_token and its position row: densevit keeps one class '
              'token (the distillation token took part in attention during training)',
              logger='current')
    return state_dict


TIMM.post = _drop_dist_token

_MAE_DECODER = 'MAE decoder (pre-training only, not part of the encoder)'

# official MAE pre-training (models_mae.py): timm's encoder, then the decoder
OFFICIAL_MAE = Layout(
    'official MAE', r'^(mask_token|decoder_embed\.weight)$', TIMM.rules,
    drop=dict(TIMM.drop, **{r'decoder_.*|mask_token': _MAE_DECODER}),
    post=_drop_dist_token, options=dict(TIMM.options))

# HF ViTMAEForPreTraining: ViTMAEModel under ``vit.`` (HF ViT's keys), the decoder under
# ``decoder.``; a ViTMAEModel alone has HF ViT's keys and goes through HF
HF_MAE = Layout(
    'Hugging Face ViTMAE', r'^decoder\.(decoder_embed|decoder_pred)\.weight$', HF.rules,
    drop=dict(HF.drop, **{r'decoder\..*': _MAE_DECODER}), options=dict(HF.options))

# densevit's own whole models: a VisionTransformer state dict under ``backbone.``
_OURS = r'backbone\.'
_NOT_BACKBONE = r'(?!backbone\.|data_preprocessor\.).*'
_HEADS = ('bbox_head.', 'decode_head.', 'auxiliary_head.')
_OURS_DROP = {r'data_preprocessor\..*': 'data preprocessor buffers (not weights)'}
DENSEVIT_MAE = Layout(
    'densevit MAE', '^' + _OURS, [(_OURS + p, r) for p, r in TIMM.rules],
    drop={_NOT_BACKBONE: 'MAE decoder / pre-training head (not part of the encoder)',
          **_OURS_DROP},
    post=_drop_dist_token, options=dict(TIMM.options))
DENSEVIT_MODEL = Layout(
    'densevit detector / segmentor (its backbone)', '^' + _OURS, DENSEVIT_MAE.rules,
    drop={_NOT_BACKBONE: 'neck and heads of a whole model (not part of the backbone)',
          **_OURS_DROP},
    post=_drop_dist_token, options=dict(TIMM.options))


def densevit_model_layout(state_dict):
    """The layout of a densevit checkpoint with its ViT under ``backbone.``, or None.

    A detector or segmentor has ``bbox_head.`` / ``decode_head.`` / ``auxiliary_head.``
    keys; any other model with keys beside ``backbone.`` is a pre-training one (MAE:
    the decoder under ``neck.`` / ``decoder.``, ``head.``, a ``mask_token``). Either
    way the ViT is the ``backbone.*`` tensors; the rest is dropped, with a logged count.
    """
    keys = list(state_dict)
    if not any(re.fullmatch(r'backbone\.blocks\.\d+\.attn\.qkv\.weight', k) for k in keys):
        return None  # no densevit / timm ViT under backbone.
    others = [k for k in keys if not k.startswith(('backbone.', 'data_preprocessor.'))]
    if others and not any(k.startswith(_HEADS) for k in others):
        return DENSEVIT_MAE
    return DENSEVIT_MODEL


def convert_vit(state_dict, strict=False):
    """Convert a ViT checkpoint's ``state_dict`` to densevit's key layout.

    Args:
        state_dict (dict): timm (DeiT, AugReg, MAE fine-tuned), official MAE, HF
            (``ViTModel``, ``ViTMAEModel``, ``ViTMAEForPreTraining``, ``Dinov2Model`` /
            ``Dinov2Backbone`` with or without registers, ``DINOv3ViTModel`` /
            ``DINOv3ViTBackbone``, ``VitDetModel`` / ``VitDetBackbone``, ``SamVisionModel`` /
            ``SamModel``, BEiT / Data2VecVision, CLIP's image tower) or MMSegmentation ViT
            tensors, densevit's own ViT, or a
            densevit MAE / detector / segmentor checkpoint (its ``backbone.*``).
        strict (bool): raise on keys no rule explains (else kept, and reported
            as unexpected when loaded).

    Returns:
        OrderedDict for :class:`~densevit.models.backbones.vit.VisionTransformer`.

    Raises:
        ValueError: the keys match no ViT layout (the first keys are listed).
    """
    from .mmseg_beit import MMSEG_BEIT  # here: it builds on this module's MMSEG_RULES
    ours = densevit_model_layout(state_dict)
    layouts = [ours] if ours is not None else []
    out = convert_state_dict(state_dict, [*layouts, OFFICIAL_MAE, TIMM, HF_MAE, HF,
                                          *dinov2.LAYOUTS, *dinov3.LAYOUTS,
                                          *vitdet.LAYOUTS, *sam.LAYOUTS, *beit.LAYOUTS,
                                          *clip.LAYOUTS, MMSEG_BEIT, MMSEG], 'ViT',
                             strict)
    if out.layout == TIMM.name and 'pos_embed' not in state_dict:
        # densevit's own ViT (its table in a module, or none: RoPE, a relative bias; timm's
        # ViTs have a bare pos_embed): timm's rules read it, but its origin (and so its
        # LayerNorm eps) is not timm's: a converted file's meta tells it
        out.layout, out.options = 'densevit ViT', {}
    return out


# timm: official MAE files holding the encoder alone; HF: ViTMAEModel (ViTModel's keys)
MAE_LAYOUTS = (DENSEVIT_MAE, OFFICIAL_MAE, TIMM, HF_MAE, HF)


def convert_mae(state_dict, strict=False):
    """An MAE checkpoint's encoder in densevit's ViT layout (:func:`convert_vit`, limited
    to the layouts MAE checkpoints come in: densevit MAE, official MAE with its decoder
    or without (timm's layout), HF ``ViTMAEForPreTraining`` and ``ViTMAEModel``, which
    has HF ``ViTModel``'s keys).

    Raises:
        ValueError: the keys are not an MAE checkpoint's (the layout they are in is named
            when densevit knows it).
    """
    out = convert_vit(state_dict, strict=strict)
    if out.layout not in {lay.name for lay in MAE_LAYOUTS}:
        raise ValueError(f'not an MAE checkpoint: its keys are in the {out.layout} layout; '
                         f'convert it with tools/convert/checkpoint.py')
    return out


def vit_size(state_dict):
    """(width, depth) of a ViT state dict in densevit's layout; None where it cannot tell."""
    width = None
    for key, dim in (('patch_embed.proj.weight', 0), ('cls_token', -1),
                     ('blocks.0.norm1.weight', 0)):
        if key in state_dict:
            width = state_dict[key].shape[dim]
            break
    blocks = {int(m[1]) for k in state_dict if (m := re.match(r'blocks\.(\d+)\.', k))}
    return width, (max(blocks) + 1 if blocks else None)


def _side(size):
    """P for a square patch size (an int or a pair), else the pair (h, w)."""
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    return h if h == w else (h, w)


def _qkv_bias(state_dict):
    """(q, k, v) bias flags of the first layer's attention; None without one."""
    prefix = 'blocks.0.attn.'
    if prefix + 'qkv.weight' not in state_dict:
        return None
    if prefix + 'qkv.bias' in state_dict:
        return True, True, True
    return tuple(f'{prefix}{p}_bias' in state_dict for p in 'qkv')


def vit_shape(state_dict):
    """``{option: value}`` of a ViT state dict in densevit's layout, for what it tells:
    ``embed_dims``, ``num_layers``, ``patch_size`` (its patch convolution), ``qkv_bias``
    (q, k, v flags, where it has a layer's attention) and, where it has the token
    embeddings (a patch convolution), ``num_register_tokens``."""
    width, depth = vit_size(state_dict)
    shape = dict(embed_dims=width, num_layers=depth, qkv_bias=_qkv_bias(state_dict))
    patch = state_dict.get('patch_embed.proj.weight')
    if patch is not None:
        shape['patch_size'] = _side(tuple(patch.shape[-2:]))
        registers = state_dict.get('register_tokens')
        shape['num_register_tokens'] = 0 if registers is None else registers.shape[1]
    return {k: v for k, v in shape.items() if v is not None}


# option -> (the checkpoint's value, the model's, what to do), phrased for one error line
_SHAPE_ERRORS = dict(
    embed_dims=('of width {v}', 'width {own} (embed_dims)',
                "build the ViT with the checkpoint's arch (embed_dims={v}) or use a checkpoint "
                'of width {own}'),
    num_layers=('with {v} layers', '{own} (num_layers)',
                "build the ViT with the checkpoint's depth (num_layers={v})"),
    patch_size=('with patch size {v}', 'patch size {own} (patch_size)',
                'build the ViT with patch_size={v}'),
    num_register_tokens=('with {v} register tokens', '{own} (num_register_tokens)',
                         'build the ViT with num_register_tokens={v}'),
    qkv_bias=('with q, k, v biases {v}', '{own} (qkv_bias)', 'build the ViT with qkv_bias={v}'))


def check_vit_size(module, state_dict, source, what='a checkpoint'):
    """Refuse a ViT checkpoint of another width, depth, patch size, number of register
    tokens or q / k / v biases than ``module`` in one line.

    Otherwise a checkpoint of another width loads nothing but a long list of tensors of
    the wrong shape, one of another depth loads only the layers both have, one of another
    patch size leaves a random patch embedding, one with other registers misses (or
    drops) them, and one with other biases (DINOv3's absent key bias) leaves them at zero.
    Then ViTDet's and SAM's windows, decomposed relative positions and residual blocks
    (:func:`densevit.checkpoint.vitdet.check_rel_pos`).

    Raises:
        CheckpointMismatchError: naming the first option that differs, with the
            checkpoint's and the model's values.
    """
    for name, v in vit_shape(state_dict).items():
        own = getattr(module, name)
        own = _side(own) if name == 'patch_size' else own
        if v != own:
            theirs, ours, advice = (p.format(v=v, own=own) for p in _SHAPE_ERRORS[name])
            raise CheckpointMismatchError(f'{source} does not fit this ViT: it is {what} '
                                          f"{theirs}, the model's ViT has {ours}; {advice}")
    vitdet.check_rel_pos(module, state_dict, source, what)  # windows, relative positions


def checkpoint_grid(path, prefix=None):
    """The patch grid (h, w) of a ViT checkpoint's position table (square tables only).

    Maps the file (safely; tensors not read), converts its layout and takes ``pos_embed.weight``
    ([1, extra + h*w, D]) less the class / distillation token rows, or, without one, a
    relative position bias table ((2h-1)(2w-1) offset rows: BEiT's).

    Raises:
        ValueError: no position table, or one whose grid is not square (give
            ``pos_grid=(h, w)`` instead).
    """
    from .read import flatten_checkpoint, load_checkpoint_safely, select_prefix
    # memory-mapped: the build reads the table's shape, not the weights (init_weights does)
    obj = load_checkpoint_safely(path, mmap=not str(path).endswith('.safetensors'))
    state_dict = convert_vit(select_prefix(flatten_checkpoint(obj, str(path)), prefix))
    table = state_dict.get('pos_embed.weight')
    if table is None and (grid := beit.relative_grid(state_dict)) is not None:
        return grid
    if table is None:
        raise ValueError(f'{path}: no position table (pos_embed) to take pos_grid from')
    rows = table.shape[1]
    extra = 1 if 'cls_token' in state_dict else 0
    side = math.isqrt(rows - extra)
    if side * side != rows - extra:
        raise ValueError(f'{path}: a position table of {rows} rows is not a square grid; '
                         f'give pos_grid=(h, w)')
    return side, side
