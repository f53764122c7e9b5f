"""Rule tables for converting checkpoint key layouts, shared by the model converters.

A :class:`Layout` describes one source layout (e.g. HF ``ViTModel``): a
signature that recognises it, rename rules, and keys to drop on purpose (with
the reason, logged). :func:`convert_state_dict` picks the layout that explains
the checkpoint's keys, renames them, fuses split q/k/v projections, and
raises a ``ValueError`` naming the keys when no layout fits.

Fusing: a rule may rename ``...query.weight`` to ``...qkv.weight@q`` (and
``@k``, ``@v``); the parts are then concatenated along dim 0 in q, k, v order,
the layout of a fused ``Linear(D, 3D)`` and of ``nn.MultiheadAttention.in_proj_*``.
Likewise ``@gate``, ``@up`` (SwiGLU's two input projections, packed in that order).
"""
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from mmengine.logging import print_log

_SHOW = 10
# parts fused along dim 0, each group in this order
_GROUPS = (('q', 'k', 'v'), ('gate', 'up'))
_PARTS = {p for group in _GROUPS for p in group}
# Hugging Face's split attention projections: Hub files (query ...), transformers 5 (q_proj ...)
QKV_PARTS = {'query': 'q', 'key': 'k', 'value': 'v', 'q_proj': 'q', 'k_proj': 'k', 'v_proj': 'v'}


class UnknownLayoutError(ValueError):
    """No candidate layout recognises the checkpoint's keys (another converter may)."""


class PartialLayoutError(ValueError):
    """The keys look like a known layout, but some have no conversion rule (strict)."""


@dataclass
class Layout:
    """One checkpoint layout.

    Args:
        name: shown in logs and errors.
        signature: regex; the layout is considered only if some key matches it
            (``re.search``).
        rules: ``(regex, replacement)`` pairs tried in order; the first whose
            regex matches the whole key renames it (``re.sub`` syntax, or a
            callable on the match).
        drop: ``{regex: reason}`` for keys deliberately not converted.
        post: optional ``fn(state_dict) -> state_dict`` run after renaming and
            fusing (e.g. to remove a token from a position table).
        options: backbone options implied by this origin (e.g.
            ``{'layer_norm_eps': 1e-12}``),
            recorded with the conversion (and in a converted file's meta) and compared
            with the backbone's attributes of the same names when loaded: a WARNING line
            where they differ, the model unchanged. Or ``fn(converted state_dict) -> dict``
            where they depend on the keys (e.g. the resize mode of the position code the
            file has).
    """
    name: str
    signature: str
    rules: Sequence = ()
    drop: dict = field(default_factory=dict)
    post: Callable | None = None
    options: dict | Callable = field(default_factory=dict)

    def rename(self, key):
        """New name, None when dropped, or the key itself unchanged with matched=False."""
        for pattern, repl in self.rules:
            m = re.fullmatch(pattern, key)
            if m:
                return (repl(m) if callable(repl) else m.expand(repl)), True
        if any(re.fullmatch(p, key) for p in self.drop):
            return None, True
        return key, False



def hf_vit_rules(prefix):
    """Rules shared by Hugging Face's ViT-style models (ViT, DINOv2), their keys under
    ``prefix`` (a regex: an optional ``vit.`` for ViT): class token, position table, patch
    embedding, and each layer's self-attention, as Hub files name them
    (``encoder.layer.N.attention.attention.query``, ``attention.output.dense``) and as
    transformers-5 modules do (``attention.q_proj``, ``o_proj``; :func:`hf_attention_rules`);
    the final ``layernorm``."""
    return [
        (prefix + r'layernorm\.(weight|bias)', r'norm.\1'),
        (prefix + r'embeddings\.cls_token', 'cls_token'),
        (prefix + r'embeddings\.position_embeddings', 'pos_embed.weight'),
        (prefix + r'embeddings\.patch_embeddings\.projection\.(weight|bias)',
         r'patch_embed.proj.\1'),
        *hf_attention_rules(prefix + r'(?:encoder\.layer|layers)\.(\d+)\.'),
    ]


def hf_attention_rules(layer):
    """The self-attention of Hugging Face's ViT-style layers (ViT, DINOv2, DINOv3) under
    ``layer`` (a regex ending in ``.``, its one group the layer index): q, k, v
    (``attention.attention.query`` in Hub files, ``attention.q_proj`` in transformers 5's
    modules) fused into ``blocks.N.attn.qkv`` (``@q`` ...), the output projection
    (``attention.output.dense``, ``attention.o_proj``) ``blocks.N.attn.proj``."""
    layer += r'attention\.'
    return [
        (layer + r'(?:attention\.)?(query|key|value|q_proj|k_proj|v_proj)\.(weight|bias)',
         lambda m: f'blocks.{m[1]}.attn.qkv.{m[3]}@{QKV_PARTS[m[2]]}'),
        (layer + r'(?:output\.dense|o_proj)\.(weight|bias)', r'blocks.\1.attn.proj.\2'),
    ]


def hf_vit_layer_rules(layer):
    """The rest of a Hugging Face ViT-style layer (ViT, BEiT, Data2VecVision) under ``layer``
    (a regex ending in ``.``, its one group the layer index): the norms before and after
    attention, and the MLP as Hub files (``intermediate.dense``, ``output.dense``) and
    transformers-5 modules (``mlp.fc1``, ``mlp.fc2``) name it."""
    return [
        (layer + r'layernorm_before\.(weight|bias)', r'blocks.\1.norm1.\2'),
        (layer + r'layernorm_after\.(weight|bias)', r'blocks.\1.norm2.\2'),
        (layer + r'(?:intermediate\.dense|mlp\.fc1)\.(weight|bias)', r'blocks.\1.mlp.fc1.\2'),
        (layer + r'(?:output\.dense|mlp\.fc2)\.(weight|bias)', r'blocks.\1.mlp.fc2.\2'),
    ]


def hf_vit_drop(prefix):
    """Keys of Hugging Face's ViT-style models (under ``prefix``) that no backbone has,
    with the reason (:attr:`Layout.drop`)."""
    return {
        prefix + r'embeddings\.mask_token': 'masked-image-modelling token (pre-training only)',
        r'classifier\..*': 'ImageNet classification head (not part of a backbone)',
    }


def prefixed_rules(rules, src, dst):
    """``rules`` for keys under the regex ``src``, renamed under ``dst`` (e.g. a backbone's
    rules inside a whole model: ``src`` the regex of ``backbone.``, ``dst`` the string)."""
    def target(repl):
        return (lambda m: dst + repl(m)) if callable(repl) else dst + repl
    return [(src + pattern, target(repl)) for pattern, repl in rules]


# a segmentor's heads under MMSegmentation's names: the decode head, and auxiliary heads
# listed (``auxiliary_head.K``, a list in its config) or single (``auxiliary_head``, a dict)
MMSEG_HEAD = r'(decode_head|auxiliary_head(?:\.\d+)?)\.'


def mmseg_head(name):
    """densevit's module name of an mmseg head (group 1 of :data:`MMSEG_HEAD`): a single
    auxiliary head is the first of densevit's always-a-list auxiliary heads."""
    return 'auxiliary_head.0' if name == 'auxiliary_head' else name


def detector_layout(name, signature):
    """A densevit detector's own keys (``backbone.*``, ``neck.*``, ``bbox_head.*``), kept as
    they are; recognised by ``signature`` (a key only that head has)."""
    return Layout(name, signature, [(r'((?:backbone|neck|bbox_head)\..+)', r'\1')])

def fuse_parts(state_dict):
    """Concatenate ``name@q``, ``name@k``, ``name@v`` (or ``name@gate``, ``name@up``)
    into ``name`` (dim 0).

    A q / k / v bias with a part missing (DINOv3 has no key bias), ``X.qkv.bias@q`` and
    ``@v``, becomes ``X.q_bias`` and ``X.v_bias``: the biases of an attention built with
    ``qkv_bias=(True, False, True)``. Other incomplete groups are left as they are, so
    they show up as unexpected keys.
    """
    out, groups = OrderedDict(), OrderedDict()
    for k, v in state_dict.items():
        base, sep, part = k.rpartition('@')
        if sep and part in _PARTS:
            groups.setdefault(base, {})[part] = v
            out.setdefault(base, None)  # keep the key order of the source
        else:
            out[k] = v
    for base, parts in groups.items():
        group = next((g for g in _GROUPS if set(parts) == set(g)), None)
        if group is not None:
            out[base] = torch.cat([parts[p] for p in group], dim=0)
        elif base.endswith('.qkv.bias') and set(parts) < set(_GROUPS[0]):
            del out[base]
            out.update({f'{base[:-len("qkv.bias")]}{p}_bias': t for p, t in parts.items()})
        else:
            del out[base]
            out.update({f'{base}@{p}': t for p, t in parts.items()})
    return out


class Converted(OrderedDict):
    """A converted state dict that remembers where it came from.

    Attributes:
        layout (str): the source layout's name (e.g. 'MMSegmentation SETR').
        options (dict): backbone options of that origin (see :class:`Layout`).
    """
    layout = 'densevit'
    options = {}
    partial = 0  # keys kept unconverted (strict=False only)


def _apply(state_dict, layout):
    out, unmatched, dropped = OrderedDict(), [], []
    for k, v in state_dict.items():
        new, matched = layout.rename(k)
        if not matched:
            unmatched.append(k)
            out[k] = v
        elif new is None:
            dropped.append(k)
        else:
            out[new] = v
    return out, unmatched, dropped


def convert_state_dict(state_dict, layouts, what, strict=False, logger='current'):
    """Convert ``state_dict`` from whichever of ``layouts`` it is in.

    Args:
        state_dict (dict): source tensors.
        layouts (Sequence[Layout]): candidate layouts.
        what (str): model name for messages (e.g. 'Swin').
        strict (bool): raise when the chosen layout leaves keys unexplained;
            otherwise they pass through unchanged (and a load reports them as
            unexpected).

    Returns:
        Converted: densevit's layout, with the source layout's name and options.

    Raises:
        UnknownLayoutError: no layout's signature matches.
        PartialLayoutError: (strict) keys the chosen layout does not explain: the
            message names the layout, how many keys it understood and the first it did not.
    """
    keys = list(state_dict)
    candidates = [lay for lay in layouts if any(re.search(lay.signature, k) for k in keys)]
    if not candidates:
        raise UnknownLayoutError(
            f'{what}: checkpoint keys match no known layout '
            f'({", ".join(lay.name for lay in layouts)}). First unmatched keys: {keys[:_SHOW]}')
    results = [(lay, *_apply(state_dict, lay)) for lay in candidates]
    layout, out, unmatched, dropped = min(results, key=lambda r: len(r[2]))
    if unmatched and strict:
        raise PartialLayoutError(
            f'{what}: the keys look like the {layout.name} layout, but only '
            f'{len(keys) - len(unmatched)} of {len(keys)} are understood; refusing to convert '
            f'part of a checkpoint. First keys not understood: {unmatched[:_SHOW]}')
    out = fuse_parts(out)
    if layout.post is not None:
        out = layout.post(out)
    out = Converted(out)
    options = layout.options(out) if callable(layout.options) else layout.options
    out.layout, out.options, out.partial = layout.name, dict(options), len(unmatched)
    print_log(f'{what}: converting a checkpoint in the {layout.name} layout '
              f'({len(keys)} keys -> {len(out)})', logger=logger)
    for pattern, reason in layout.drop.items():
        hits = [k for k in dropped if re.fullmatch(pattern, k)]
        if hits:
            more = '...' if len(hits) > 3 else ''
            print_log(f'{what}: dropped {len(hits)} key(s) {hits[:3]}{more}: {reason}',
                      logger=logger)
    if unmatched:
        print_log(f'{what}: PARTIAL CONVERSION: {len(unmatched)} of {len(keys)} key(s) of this '
                  f'{layout.name} checkpoint have no conversion rule and are kept as they are '
                  f'(they will not load into a densevit model): {unmatched[:_SHOW]}',
                  logger=logger, level=30)
    return out
