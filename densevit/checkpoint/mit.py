"""SegFormer / Mix Transformer checkpoints (official NVlabs, Hugging Face, MMSegmentation 1.x)
-> densevit's :class:`MixVisionTransformer` and ``EncoderDecoder(MixVisionTransformer,
SegformerHead)``.

Encoder keys. Per densevit name (stage ``i`` from 0, block ``j``; ``b.`` =
``stages.i.blocks.j.``): official NVlabs (stages from 1) | HF transformers 4.x (the
Hub files) | HF 5.x | MMSegmentation 1.x.

- ``stages.i.patch_embed.{proj,norm}``: ``patch_embed{i+1}.{proj,norm}`` |
  ``encoder.patch_embeddings.i.{proj,layer_norm}`` |
  ``stages.i.patch_embeddings.{proj,layer_norm}`` | ``layers.i.0.{projection,norm}``
- ``b.norm1`` / ``b.norm2``: ``block{i+1}.j.norm1/2`` | ``encoder.block.i.j.layer_norm_1/2``
  | ``stages.i.blocks.j.layernorm_before/after`` | ``layers.i.1.j.norm1/2``
- ``b.attn.q``: same | ``...attention.self.query`` | ``...attention.q_proj`` | rows
  ``[0, C)`` of ``layers.i.1.j.attn.attn.in_proj_{weight,bias}``
- ``b.attn.kv``: same | ``[...attention.self.key; ...attention.self.value]`` |
  ``[...attention.k_proj; ...attention.v_proj]`` | rows ``[C, 3C)`` of ``in_proj_*``
- ``b.attn.proj``: same | ``...attention.output.dense`` | ``...attention.o_proj`` |
  ``...attn.attn.out_proj``
- ``b.attn.sr``, ``b.attn.norm``: same | ``...attention.self.{sr,layer_norm}`` |
  ``...attention.sequence_reduction.{sequence_reduction,layer_norm}`` | ``...attn.{sr,norm}``
- ``b.mlp.fc1``, ``b.mlp.dwconv``, ``b.mlp.fc2``: ``mlp.fc1``, ``mlp.dwconv.dwconv``,
  ``mlp.fc2`` | ``mlp.dense1``, ``mlp.dwconv.dwconv``, ``mlp.dense2`` | ``mlp.fc1``,
  ``mlp.dwconv.dwconv``, ``mlp.fc2`` | ``ffn.layers.0``, ``ffn.layers.1``, ``ffn.layers.4``
- ``stages.i.norm``: ``norm{i+1}`` | ``encoder.layer_norm.i`` | ``stages.i.layer_norm`` |
  ``layers.i.2``

An encoder may sit under ``backbone.`` (a segmentor checkpoint) or ``segformer.`` (an
HF model); :func:`convert_mit` takes it from there.

Non-renaming facts of the encoder:

- HF: key and value are separate Linear layers ([C, C] each); densevit's ``attn.kv``
  stacks them, keys first ([2C, C]), as the official ``kv`` does.
- MMSegmentation (``mmseg/models/backbones/mit.py``): attention is an
  ``nn.MultiheadAttention`` whose ``in_proj_weight`` [3C, C] stacks q, k, v; rows
  ``[0, C)`` are ``attn.q``, rows ``[C, 3C)`` are ``attn.kv`` (already keys first).
  Mix-FFN's two projections are 1x1 convs ([C', C, 1, 1]) and become Linear weights
  ([C', C]); ``ffn.layers`` 2, 3, 5 are GELU / dropouts (no weights). mmseg gives
  ``out_proj`` a bias only when ``qkv_bias=True`` (every zoo config).
- LayerNorm eps (``Layout.options``, compared with ``MixVisionTransformer.layer_norm_eps``): official
  code (``mix_transformer.py``) 1e-5 in the patch embeddings and the key/value
  reduction, 1e-6 in the blocks and the stage-final norms; HF
  (``modeling_segformer.py``) 1e-5 everywhere (plain ``nn.LayerNorm``); mmseg 1e-6
  everywhere (``norm_cfg=dict(type='LN', eps=1e-6)`` for all of them).
- Classification heads (``head.*``, ``classifier.*``) are dropped; so are decode
  heads when only the encoder is converted (:func:`convert_mit`).

Decode head (whole models, :func:`convert_segformer` and :func:`model_layouts`),
densevit ``SegformerHead``:

- official: ``decode_head.linear_c{n}.proj`` (Linear [C, C_n]) ->
  ``linear_projs.{n-1}`` (1x1 conv [C, C_n, 1, 1], ``proj_type='linear'``);
  ``linear_fuse.conv`` / ``linear_fuse.bn`` -> ``fuse.conv`` / ``fuse.bn``;
  ``linear_pred`` -> ``conv_seg``. The official head also carries mmseg 0.x's
  ``conv_seg``, never used (it classifies with ``linear_pred``): dropped.
- HF: ``decode_head.linear_c.{i}.proj`` (4.x) / ``linear_projections.{i}.proj``
  (5.x) -> ``linear_projs.{i}`` (as official); ``linear_fuse`` (conv, no bias) +
  ``batch_norm`` -> ``fuse.conv`` + ``fuse.bn``; ``classifier`` -> ``conv_seg``.
- MMSegmentation (``mmseg/models/decode_heads/segformer_head.py``): a conv-norm-ReLU
  ``ConvModule`` per level, ``decode_head.convs.{i}`` -> ``linear_projs.{i}``
  (``proj_type='conv_norm_act'``); ``fusion_conv`` -> ``fuse``; ``conv_seg`` same.
  mmseg concatenates the levels shallowest first, official, HF and densevit deepest
  first, so the C-channel input blocks of ``fusion_conv.conv.weight`` [C, N*C, 1, 1]
  are put in reverse order.
"""
import re

import torch

from .layout import Layout, convert_state_dict, prefixed_rules
from .read import flatten_checkpoint

_W = r'(weight|bias)'

# LayerNorm eps of each origin, per kind of norm (see MixVisionTransformer.layer_norm_eps).
OFFICIAL_LAYER_NORM_EPS = dict(patch_embed=1e-5, sr=1e-5, block=1e-6, stage=1e-6)
HF_LAYER_NORM_EPS = 1e-5
MMSEG_LAYER_NORM_EPS = 1e-6

_DROP_HEADS = {
    r'(?:backbone\.|segformer\.)?(head|classifier)\..*':
        'classification head (not part of the encoder)',
    r'(decode_head|auxiliary_head)\..*': 'decode head (converting the encoder only)',
}


def _stack_kv(state_dict):
    """``X@k`` and ``X@v`` ([C, ...] each) -> ``X`` ([2C, ...], keys first)."""
    out = {}
    for key, value in state_dict.items():
        base, sep, part = key.rpartition('@')
        if not sep:
            out[key] = value
        elif part == 'k' and f'{base}@v' in state_dict:
            out[base] = torch.cat([value, state_dict[f'{base}@v']], dim=0)
        elif part == 'v' and f'{base}@k' in state_dict:
            continue
        else:
            raise ValueError(f'MiT: {key} has no matching key / value projection')
    return out


def _split_in_proj(state_dict):
    """mmseg ``attn.in_proj_*`` [3C, ...] -> ``attn.q`` [C, ...] + ``attn.kv`` [2C, ...];
    Mix-FFN 1x1 conv weights [C', C, 1, 1] -> Linear weights [C', C]."""
    out = {}
    for key, value in state_dict.items():
        m = re.fullmatch(r'(.*\.attn\.)in_proj_' + _W, key)
        if m:
            c = value.shape[0] // 3
            out[f'{m[1]}q.{m[2]}'], out[f'{m[1]}kv.{m[2]}'] = value[:c], value[c:]
        elif re.fullmatch(r'.*\.mlp\.fc[12]\.weight', key) and value.ndim == 4:
            out[key] = value.flatten(1)
        else:
            out[key] = value
    return out


def _backbone(name, signature, rules, src='', dst='', drop=None, post=None, options=None):
    """A Layout whose rules are ``rules`` under source prefix ``src`` and target ``dst``."""
    return Layout(name, signature, prefixed_rules(rules, src, dst),
                  drop=dict(drop or {}), post=post, options=dict(options or {}))


_OFFICIAL_RULES = [
    (r'patch_embed(\d)\.(proj|norm)\.' + _W,
     lambda m: f'stages.{int(m[1]) - 1}.patch_embed.{m[2]}.{m[3]}'),
    (r'block(\d)\.(\d+)\.(norm1|norm2|attn\.q|attn\.kv|attn\.proj|attn\.sr|attn\.norm|mlp\.fc1|'
     r'mlp\.fc2)\.' + _W, lambda m: f'stages.{int(m[1]) - 1}.blocks.{m[2]}.{m[3]}.{m[4]}'),
    (r'block(\d)\.(\d+)\.mlp\.dwconv\.dwconv\.' + _W,
     lambda m: f'stages.{int(m[1]) - 1}.blocks.{m[2]}.mlp.dwconv.{m[3]}'),
    (r'norm(\d)\.' + _W, lambda m: f'stages.{int(m[1]) - 1}.norm.{m[2]}'),
]

_HF_BLOCK = {
    # 4.x names
    'layer_norm_1': 'norm1', 'layer_norm_2': 'norm2', 'attention.self.query': 'attn.q',
    'attention.self.key': 'attn.kv@k', 'attention.self.value': 'attn.kv@v',
    'attention.output.dense': 'attn.proj', 'attention.self.sr': 'attn.sr',
    'attention.self.layer_norm': 'attn.norm', 'mlp.dense1': 'mlp.fc1', 'mlp.dense2': 'mlp.fc2',
    'mlp.dwconv.dwconv': 'mlp.dwconv',
    # 5.x names
    'layernorm_before': 'norm1', 'layernorm_after': 'norm2', 'attention.q_proj': 'attn.q',
    'attention.k_proj': 'attn.kv@k', 'attention.v_proj': 'attn.kv@v',
    'attention.o_proj': 'attn.proj',
    'attention.sequence_reduction.sequence_reduction': 'attn.sr',
    'attention.sequence_reduction.layer_norm': 'attn.norm', 'mlp.fc1': 'mlp.fc1',
    'mlp.fc2': 'mlp.fc2',
}
_HF_BLOCK_RE = '|'.join(re.escape(k) for k in sorted(_HF_BLOCK, key=len, reverse=True))


def _hf_block(m):
    module, sep, part = _HF_BLOCK[m[3]].partition('@')
    return f'stages.{m[1]}.blocks.{m[2]}.{module}.{m[4]}{sep}{part}'


_HF_RULES = [
    (r'(?:encoder\.patch_embeddings\.(\d+)|stages\.(\d+)\.patch_embeddings)\.'
     r'(proj|layer_norm)\.' + _W,
     lambda m: f'stages.{m[1] or m[2]}.patch_embed.{"proj" if m[3] == "proj" else "norm"}.{m[4]}'),
    (r'(?:encoder\.block|stages)\.(\d+)\.(?:blocks\.)?(\d+)\.(' + _HF_BLOCK_RE + r')\.' + _W,
     _hf_block),
    (r'(?:encoder\.layer_norm\.(\d+)|stages\.(\d+)\.layer_norm)\.' + _W,
     lambda m: f'stages.{m[1] or m[2]}.norm.{m[3]}'),
]

_MMSEG_FFN = {'0': 'fc1', '1': 'dwconv', '4': 'fc2'}
_MMSEG_RULES = [
    (r'layers\.(\d+)\.0\.(projection|norm)\.' + _W,
     lambda m: f'stages.{m[1]}.patch_embed.{"proj" if m[2] == "projection" else "norm"}.{m[3]}'),
    (r'layers\.(\d+)\.1\.(\d+)\.(norm1|norm2|attn\.sr|attn\.norm)\.' + _W,
     r'stages.\1.blocks.\2.\3.\4'),
    (r'layers\.(\d+)\.1\.(\d+)\.attn\.attn\.in_proj_' + _W,
     r'stages.\1.blocks.\2.attn.in_proj_\3'),  # split into q / kv by _split_in_proj
    (r'layers\.(\d+)\.1\.(\d+)\.attn\.attn\.out_proj\.' + _W, r'stages.\1.blocks.\2.attn.proj.\3'),
    (r'layers\.(\d+)\.1\.(\d+)\.ffn\.layers\.([014])\.' + _W,
     lambda m: f'stages.{m[1]}.blocks.{m[2]}.mlp.{_MMSEG_FFN[m[3]]}.{m[4]}'),
    (r'layers\.(\d+)\.2\.' + _W, r'stages.\1.norm.\2'),
]

_DENSEVIT_RULES = [
    (r'(stages\.\d+\.(?:patch_embed\.(?:proj|norm)|norm|blocks\.\d+\.(?:norm1|norm2|attn\.q|'
     r'attn\.kv|attn\.proj|attn\.sr|attn\.norm|mlp\.fc1|mlp\.dwconv|mlp\.fc2))\.' + _W + ')',
     r'\1'),
]

# per kind, as MixVisionTransformer.layer_norm_eps reports them (compared on load)
_OPT_OFFICIAL = {'layer_norm_eps': dict(OFFICIAL_LAYER_NORM_EPS)}
_OPT_HF = {'layer_norm_eps': dict.fromkeys(OFFICIAL_LAYER_NORM_EPS, HF_LAYER_NORM_EPS)}
_OPT_MMSEG = {'layer_norm_eps': dict.fromkeys(OFFICIAL_LAYER_NORM_EPS, MMSEG_LAYER_NORM_EPS)}

# Encoder layouts: a bare encoder, or the encoder inside a whole model (prefix kept optional).
BACKBONE_LAYOUTS = {
    'densevit': _backbone('densevit MiT', r'^(backbone\.)?stages\.\d+\.patch_embed\.proj\.weight$',
                          _DENSEVIT_RULES, src=r'(?:backbone\.)?', drop=_DROP_HEADS),
    'official': _backbone('official SegFormer MiT', r'^(backbone\.)?patch_embed1\.proj\.weight$',
                          _OFFICIAL_RULES, src=r'(?:backbone\.)?', drop=_DROP_HEADS,
                          options=_OPT_OFFICIAL),
    'hf_legacy': _backbone('Hugging Face SegFormer (4.x names)',
                           r'^(segformer\.)?encoder\.patch_embeddings\.0\.proj\.weight$',
                           _HF_RULES, src=r'(?:segformer\.)?', drop=_DROP_HEADS, post=_stack_kv,
                           options=_OPT_HF),
    'hf': _backbone('Hugging Face SegFormer (5.x names)',
                    r'^(segformer\.)?stages\.0\.patch_embeddings\.proj\.weight$',
                    _HF_RULES, src=r'(?:segformer\.)?', drop=_DROP_HEADS, post=_stack_kv,
                    options=_OPT_HF),
    'mmseg': _backbone('MMSegmentation MiT',
                       r'^(backbone\.)?layers\.\d+\.1\.\d+\.attn\.attn\.in_proj_weight$',
                       _MMSEG_RULES, src=r'(?:backbone\.)?', drop=_DROP_HEADS,
                       post=_split_in_proj, options=_OPT_MMSEG),
}


# ------------------------------------------------------------------ whole models
def _linear_to_conv(state_dict):
    """Per-level Linear weights [C, C_i] -> 1x1 conv weights [C, C_i, 1, 1]."""
    return {k: (v[:, :, None, None] if re.fullmatch(r'decode_head\.linear_projs\.\d+\.weight', k)
                and v.ndim == 2 else v) for k, v in state_dict.items()}


def _reverse_fuse_blocks(state_dict):
    """mmseg's fuse conv reads the levels shallowest first; densevit's deepest first."""
    key = 'decode_head.fuse.conv.weight'
    if key in state_dict:
        w = state_dict[key]
        c, nc = w.shape[:2]
        if nc % c:
            raise ValueError(f'MMSegmentation SegFormer: {key} has {nc} input channels, not a '
                             f'multiple of its {c} outputs')
        state_dict[key] = w.reshape(c, nc // c, c, *w.shape[2:]).flip(1).reshape(w.shape)
    return state_dict


def _then(*fns):
    def run(state_dict):
        for fn in fns:
            state_dict = fn(state_dict)
        return state_dict
    return run


_D = 'decode_head.'
OFFICIAL_SEGFORMER = _backbone(
    'official SegFormer', r'^backbone\.patch_embed1\.proj\.weight$', _OFFICIAL_RULES,
    src=r'backbone\.', dst='backbone.', options=_OPT_OFFICIAL, post=_linear_to_conv,
    drop={r'decode_head\.conv_seg\..*': "mmseg 0.x's conv_seg, unused by the official head "
                                        '(it classifies with linear_pred)'})
OFFICIAL_SEGFORMER.rules = list(OFFICIAL_SEGFORMER.rules) + [
    (r'decode_head\.linear_c(\d)\.proj\.' + _W,
     lambda m: f'{_D}linear_projs.{int(m[1]) - 1}.{m[2]}'),
    (r'decode_head\.linear_fuse\.(conv|bn)\.(.+)', _D + r'fuse.\1.\2'),
    (r'decode_head\.linear_pred\.' + _W, _D + r'conv_seg.\1'),
]

HF_SEGFORMER = _backbone(
    'Hugging Face SegFormer', r'^segformer\.(encoder\.patch_embeddings\.0|stages\.0\.'
    r'patch_embeddings)\.proj\.weight$', _HF_RULES, src=r'segformer\.', dst='backbone.',
    options=_OPT_HF, post=_then(_stack_kv, _linear_to_conv))
HF_SEGFORMER.rules = list(HF_SEGFORMER.rules) + [
    (r'decode_head\.(?:linear_c|linear_projections)\.(\d+)\.proj\.' + _W,
     _D + r'linear_projs.\1.\2'),
    (r'decode_head\.linear_fuse\.weight', _D + 'fuse.conv.weight'),
    (r'decode_head\.batch_norm\.(.+)', _D + r'fuse.bn.\1'),
    (r'decode_head\.classifier\.' + _W, _D + r'conv_seg.\1'),
]

MMSEG_SEGFORMER = _backbone(
    'MMSegmentation SegFormer', r'^backbone\.layers\.\d+\.1\.\d+\.attn\.attn\.in_proj_weight$',
    _MMSEG_RULES, src=r'backbone\.', dst='backbone.', options=_OPT_MMSEG,
    post=_then(_split_in_proj, _reverse_fuse_blocks))
MMSEG_SEGFORMER.rules = list(MMSEG_SEGFORMER.rules) + [
    (r'decode_head\.convs\.(\d+)\.(.+)', _D + r'linear_projs.\1.\2'),
    (r'decode_head\.fusion_conv\.(.+)', _D + r'fuse.\1'),
    (r'decode_head\.conv_seg\.' + _W, _D + r'conv_seg.\1'),
]

WHOLE_LAYOUTS = [OFFICIAL_SEGFORMER, HF_SEGFORMER, MMSEG_SEGFORMER]


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`)."""
    return list(WHOLE_LAYOUTS)


# ------------------------------------------------------------------ entry points
def _flat(state_dict):
    return flatten_checkpoint(state_dict, 'MiT checkpoint')


def detect_mit_layout(state_dict):
    """'densevit', 'official', 'hf_legacy', 'hf', 'mmseg', or None if no MiT is recognised."""
    keys = list(_flat(state_dict)) if state_dict else []
    for name, layout in BACKBONE_LAYOUTS.items():
        if any(re.search(layout.signature, k) for k in keys):
            return name
    return None


def convert_mit(state_dict, strict=True):
    """Any supported MiT checkpoint -> ``MixVisionTransformer`` state dict.

    Accepts a bare encoder, a segmentor checkpoint (``backbone.*``; the decode head
    is dropped, logged) or an HF ``Segformer*`` model (``segformer.*``), nested in
    ``{'state_dict': ...}`` or not.

    Returns:
        Converted: densevit's encoder keys, with the origin's ``layout`` name and
        ``options`` (LayerNorm eps).

    Raises:
        ValueError: no layout fits, or (``strict``, the default) keys the layout
            cannot place; the message names the layout and the first such keys.
    """
    return convert_state_dict(_flat(state_dict), list(BACKBONE_LAYOUTS.values()), 'MiT', strict)


def convert_segformer(state_dict, strict=True):
    """A whole official / HF / MMSegmentation SegFormer -> densevit ``EncoderDecoder`` keys
    (``backbone.*`` + ``decode_head.*``); every input key must be placed (``strict``)."""
    return convert_state_dict(_flat(state_dict), WHOLE_LAYOUTS, 'SegFormer', strict)
