"""Map official and Hugging Face SegFormer checkpoints onto densevit's names.

Pure functions, state dict in, state dict out. Per densevit name (stage
``i`` from 0, block ``j``): official NVlabs name (stages from 1) | HF
transformers 4.x name (the Hub checkpoints) | HF 5.x name.

- ``stages.{i}.patch_embed.{proj,norm}``: ``patch_embed{i+1}.{proj,norm}`` |
  ``encoder.patch_embeddings.{i}.{proj,layer_norm}`` |
  ``stages.{i}.patch_embeddings.{proj,layer_norm}``
- ``stages.{i}.blocks.{j}.`` + ``norm1`` / ``norm2``: ``block{i+1}.{j}.`` +
  same | ``encoder.block.{i}.{j}.`` + ``layer_norm_1`` / ``layer_norm_2`` |
  ``stages.{i}.blocks.{j}.`` + ``layernorm_before`` / ``layernorm_after``
- ``attn.q``, ``attn.kv``, ``attn.proj``: same | ``attention.self.query``,
  ``[attention.self.key; attention.self.value]``, ``attention.output.dense`` |
  ``attention.q_proj``, ``[k_proj; v_proj]``, ``attention.o_proj``
- ``attn.sr``, ``attn.norm``: same | ``attention.self.sr``,
  ``attention.self.layer_norm`` | ``attention.sequence_reduction.``
  ``{sequence_reduction, layer_norm}``
- ``mlp.fc1``, ``mlp.dwconv``, ``mlp.fc2``: ``mlp.fc1``, ``mlp.dwconv.dwconv``,
  ``mlp.fc2`` | ``mlp.dense1``, ``mlp.dwconv.dwconv``, ``mlp.dense2`` |
  ``mlp.fc1``, ``mlp.dwconv.dwconv``, ``mlp.fc2``
- ``stages.{i}.norm``: ``norm{i+1}`` | ``encoder.layer_norm.{i}`` |
  ``stages.{i}.layer_norm``

So the official rename is: ``patch_embed{n}. -> stages.{n-1}.patch_embed.``,
``block{n}. -> stages.{n-1}.blocks.``, ``norm{n}. -> stages.{n-1}.norm.``,
``mlp.dwconv.dwconv -> mlp.dwconv``. HF's separate key/value projections
([C, C] each) are stacked into ``kv`` ([2C, C], keys first). Classification heads (``head.*``,
``classifier.*``) are dropped.

Decode head (``SegformerHead``): official ``decode_head.linear_c{n}.proj`` and
HF ``decode_head.linear_c.{i}.proj`` / ``linear_projections.{i}.proj`` (Linear
[C, C_i]) become ``decode_head.linear_projs.{i}`` (1x1 conv [C, C_i, 1, 1]);
``linear_fuse.conv`` + ``linear_fuse.bn`` (official) or ``linear_fuse`` +
``batch_norm`` (HF) become ``fuse.conv`` + ``fuse.bn``; ``linear_pred`` /
``classifier`` become ``conv_seg``.

Numerics: official blocks use LayerNorm eps 1e-6, HF uses 1e-5 everywhere;
the weights are the same, outputs differ by that eps only.
"""
import re

import torch

_LEAF = r'(weight|bias)'

# Per layout: regexes for the three kinds of backbone keys, the stage-number
# offset (official counts stages from 1), and the block-submodule names.
_LAYOUTS = {
    'official': dict(
        patch=r'patch_embed(\d+)\.(proj|norm)', block=r'block(\d+)\.(\d+)\.(.+)',
        norm=r'norm(\d+)', offset=1,
        block_map={'norm1': 'norm1', 'attn.q': 'attn.q', 'attn.kv': 'attn.kv',
                   'attn.proj': 'attn.proj', 'attn.sr': 'attn.sr', 'attn.norm': 'attn.norm',
                   'norm2': 'norm2', 'mlp.fc1': 'mlp.fc1', 'mlp.dwconv.dwconv': 'mlp.dwconv',
                   'mlp.fc2': 'mlp.fc2'}),
    'hf_legacy': dict(  # transformers 4.x (and the checkpoints on the Hub)
        patch=r'encoder\.patch_embeddings\.(\d+)\.(proj|layer_norm)',
        block=r'encoder\.block\.(\d+)\.(\d+)\.(.+)', norm=r'encoder\.layer_norm\.(\d+)', offset=0,
        block_map={'layer_norm_1': 'norm1', 'attention.self.query': 'attn.q',
                   'attention.self.key': 'attn.k', 'attention.self.value': 'attn.v',
                   'attention.output.dense': 'attn.proj', 'attention.self.sr': 'attn.sr',
                   'attention.self.layer_norm': 'attn.norm', 'layer_norm_2': 'norm2',
                   'mlp.dense1': 'mlp.fc1', 'mlp.dwconv.dwconv': 'mlp.dwconv',
                   'mlp.dense2': 'mlp.fc2'}),
    'hf': dict(  # transformers 5.x module tree
        patch=r'stages\.(\d+)\.patch_embeddings\.(proj|layer_norm)',
        block=r'stages\.(\d+)\.blocks\.(\d+)\.(.+)', norm=r'stages\.(\d+)\.layer_norm', offset=0,
        block_map={'layernorm_before': 'norm1', 'attention.q_proj': 'attn.q',
                   'attention.k_proj': 'attn.k', 'attention.v_proj': 'attn.v',
                   'attention.o_proj': 'attn.proj',
                   'attention.sequence_reduction.sequence_reduction': 'attn.sr',
                   'attention.sequence_reduction.layer_norm': 'attn.norm',
                   'layernorm_after': 'norm2', 'mlp.fc1': 'mlp.fc1',
                   'mlp.dwconv.dwconv': 'mlp.dwconv', 'mlp.fc2': 'mlp.fc2'}),
}
_OURS = r'stages\.\d+\.patch_embed\.proj\.weight'
_PREFIXES = ('', 'backbone.', 'segformer.')  # bare, segmentor checkpoint, HF model
_NOT_BACKBONE = ('head.', 'classifier.', 'decode_head.', 'auxiliary_head.')


def _unwrap(state_dict):
    """Strip checkpoint wrappers (``{'state_dict': ...}``) and DDP's ``module.``."""
    for key in ('state_dict', 'model'):
        if isinstance(state_dict.get(key), dict):
            state_dict = state_dict[key]
    return {k[len('module.'):] if k.startswith('module.') else k: v
            for k, v in state_dict.items()}


def _find_layout(keys):
    """(layout name, key prefix) of the backbone in ``keys``, or (None, None)."""
    for prefix in _PREFIXES:
        esc = re.escape(prefix)
        if any(re.fullmatch(esc + _OURS, k) for k in keys):
            return 'densevit', prefix
        for name, spec in _LAYOUTS.items():
            pattern = esc + spec['patch'] + r'\.weight'
            if any(re.fullmatch(pattern, k) for k in keys):
                return name, prefix
    return None, None


def detect_mit_layout(state_dict):
    """'densevit', 'official', 'hf_legacy', 'hf', or None if no MiT is recognised."""
    return _find_layout(list(_unwrap(state_dict)))[0]


def _unknown(what, keys):
    keys = sorted(keys)
    return ValueError(f'{what}: {len(keys)} key(s) not understood, first: {keys[:10]}. '
                      f'Supported layouts: densevit, official SegFormer (NVlabs), '
                      f'HF transformers SegFormer (4.x and 5.x names).')


def _rename_backbone_key(key, spec):
    """One backbone key (prefix removed) -> densevit name, or None if no rule fits."""
    off = spec['offset']
    m = re.fullmatch(spec['patch'] + r'\.' + _LEAF, key)
    if m:
        sub = 'proj' if m[2] == 'proj' else 'norm'
        return f'stages.{int(m[1]) - off}.patch_embed.{sub}.{m[3]}'
    m = re.fullmatch(spec['norm'] + r'\.' + _LEAF, key)
    if m:
        return f'stages.{int(m[1]) - off}.norm.{m[2]}'
    m = re.fullmatch(spec['block'], key)
    if m:
        module, _, leaf = m[3].rpartition('.')
        if module in spec['block_map'] and leaf in ('weight', 'bias'):
            return f'stages.{int(m[1]) - off}.blocks.{m[2]}.{spec["block_map"][module]}.{leaf}'
    return None


def _stack_kv(state_dict):
    """Replace separate ``attn.k`` / ``attn.v`` entries by one ``attn.kv`` ([k; v] rows)."""
    out = {}
    for key, value in state_dict.items():
        m = re.fullmatch(r'(.+\.attn\.)([kv])\.' + _LEAF, key)
        if m is None:
            out[key] = value
        elif m[2] == 'k':
            v_key = f'{m[1]}v.{m[3]}'
            if v_key not in state_dict:
                raise ValueError(f'convert_mit: {key} has no matching value projection {v_key}')
            out[f'{m[1]}kv.{m[3]}'] = torch.cat([value, state_dict[v_key]], dim=0)
        elif f'{m[1]}k.{m[3]}' not in state_dict:
            raise ValueError(f'convert_mit: {key} has no matching key projection')
    return out


def convert_mit(state_dict):
    """Any supported MiT checkpoint -> ``MixVisionTransformer`` state dict.

    Accepts a bare encoder state dict, an official segmentor checkpoint
    (``backbone.*``; other top-level modules are ignored), or an HF
    ``Segformer*`` model (``segformer.*``). Raises ValueError naming the
    first keys it cannot place, rather than dropping them silently.
    """
    state_dict = _unwrap(state_dict)
    layout, prefix = _find_layout(list(state_dict))
    if layout is None:
        raise _unknown('convert_mit: no MiT encoder layout recognised', state_dict)
    # Classification / segmentation heads are not part of the encoder.
    sub = {k[len(prefix):]: v for k, v in state_dict.items()
           if k.startswith(prefix) and not k[len(prefix):].startswith(_NOT_BACKBONE)}
    if layout == 'densevit':
        return sub
    out, unmatched = {}, []
    for key, value in sub.items():
        new = _rename_backbone_key(key, _LAYOUTS[layout])
        if new is None:
            unmatched.append(prefix + key)
        else:
            out[new] = value
    if unmatched:
        raise _unknown(f'convert_mit ({layout} layout)', unmatched)
    return _stack_kv(out)


# Decode head: (regex on the key after 'decode_head.', target template); a
# Linear weight [C, C_i] becomes a 1x1 conv weight [C, C_i, 1, 1].
_HEAD_RULES = [
    (r'linear_c(\d)\.proj\.' + _LEAF, lambda m: f'linear_projs.{int(m[1]) - 1}.{m[2]}'),
    (r'linear_c\.(\d+)\.proj\.' + _LEAF, lambda m: f'linear_projs.{m[1]}.{m[2]}'),
    (r'linear_projections\.(\d+)\.proj\.' + _LEAF, lambda m: f'linear_projs.{m[1]}.{m[2]}'),
    (r'linear_fuse\.conv\.weight', lambda m: 'fuse.conv.weight'),
    (r'linear_fuse\.weight', lambda m: 'fuse.conv.weight'),
    (r'(?:linear_fuse\.bn|batch_norm)\.(.+)', lambda m: f'fuse.bn.{m[1]}'),
    (r'(?:linear_pred|classifier)\.' + _LEAF, lambda m: f'conv_seg.{m[1]}'),
]


def convert_segformer(state_dict):
    """A whole official / HF SegFormer segmentation checkpoint -> densevit.

    Returns ``backbone.*`` (``MixVisionTransformer``) and ``decode_head.*``
    (``SegformerHead``) keys, as an ``EncoderDecoder`` holds them. Every
    input key must be placed; ValueError lists the first that are not.
    """
    state_dict = _unwrap(state_dict)
    layout, prefix = _find_layout(list(state_dict))
    if layout is None or prefix == '':
        raise _unknown('convert_segformer: no backbone.* or segformer.* encoder found',
                       state_dict)
    out = {'backbone.' + k: v for k, v in convert_mit(state_dict).items()}
    # The official head inherits mmseg 0.x's ``conv_seg`` but classifies with
    # ``linear_pred``; its ``conv_seg`` is an untrained leftover.
    unused = 'decode_head.conv_seg.' if 'decode_head.linear_pred.weight' in state_dict else None
    unmatched = []
    for key, value in state_dict.items():
        if key.startswith(prefix) or (unused and key.startswith(unused)):
            continue
        if not key.startswith('decode_head.'):
            unmatched.append(key)
            continue
        for pattern, target in _HEAD_RULES:
            m = re.fullmatch(pattern, key[len('decode_head.'):])
            if m:
                new = target(m)
                if new.startswith('linear_projs.') and new.endswith('weight') and value.ndim == 2:
                    value = value[:, :, None, None]
                out['decode_head.' + new] = value
                break
        else:
            unmatched.append(key)
    if unmatched:
        raise _unknown('convert_segformer', unmatched)
    return out
