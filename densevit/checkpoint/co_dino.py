"""MMDetection's Co-DINO checkpoints (``projects/CO-DETR``: ``CoDETR`` with a ``CoDINOHead``
query head and ``CoATSSHead`` auxiliary heads) -> densevit's ``DeformableDETR`` with a
``CoDINOHead``.

Co-DINO's query head keeps its transformer in MMDetection 2's layout
(``query_head.transformer.encoder.layers.N.attentions.0`` / ``ffns.0``,
``decoder.layers.N.attentions.{0,1}``, ``decoder.ref_point_head.{0,2}``, ``enc_output``,
``query_embed``; ``query_head.{cls,reg}_branches``, ``query_head.dn_generator``): each such
key is renamed to MMDetection 3's ``DINO`` name and converted by that layout
(:func:`densevit.checkpoint.deformable_detr.mmdet_layout`), as are ``backbone.*`` and the
``ChannelMapper`` ``neck.*``. Co-DINO's own parts: ``query_head.downsample`` (the extra
level) -> ``bbox_head.aux_downsample``, ``query_head.transformer.aux_pos_trans[_norm].N``
-> ``bbox_head.aux_pos_trans[_norm].N``, ``bbox_head.N`` (the ATSS heads) ->
``bbox_head.aux_heads.N``. Signature ``query_head.transformer.aux_pos_trans``.

Only ATSS auxiliary heads: a file with Co-DINO's Faster R-CNN head (``rpn_head``,
``roi_head``) has keys no rule explains (strict loading refuses it), and its ATSS head's
projection is ``aux_pos_trans.1`` (the RoI head's comes first).

Co-Deformable-DETR (the authors' ``CoDeformDETRHead``, Sense-X/Co-DETR; its transformer in
the same MMDetection 2 layout) -> a ``CoDeformableDETRHead``: the same query-head rules
with MMDetection 3's Deformable DETR names (two-stage ``pos_trans[_norm]``), the head's
``query_embedding`` [Q, D] (mixed selection's content queries) -> ``bbox_head.content_embed``,
``transformer.pos_feats_trans[_norm].N`` -> ``bbox_head.aux_feat_trans[_norm].N``,
``transformer.head_pos_embed`` [H, D] -> ``bbox_head.aux_head_embed``. Signature
``query_head.transformer.pos_trans``. The authors' files keep ``head_pos_embed`` as
[H, 1] (see co_deformable_detr_head.py): a shape strict loading refuses.
"""
import re

from .deformable_detr import mmdet_layout
from .layout import Layout

_LEAF = r'(weight|bias)'
# a Co-DETR query head's key (without ``query_head.``) -> MMDetection 3's DINO / Deformable
# DETR key
_TO_DINO = [
    (r'transformer\.level_embeds', 'level_embed'),
    (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.attentions\.0\.(.+)',
     r'\1.layers.\2.self_attn.\3'),
    (r'transformer\.decoder\.layers\.(\d+)\.attentions\.1\.(.+)', r'decoder.layers.\1.cross_attn.\2'),
    (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.ffns\.0\.(.+)', r'\1.layers.\2.ffn.\3'),
    (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.norms\.(.+)', r'\1.layers.\2.norms.\3'),
    (r'transformer\.decoder\.ref_point_head\.(0|2)\.' + _LEAF,
     lambda m: f'decoder.ref_point_head.layers.{int(m[1]) // 2}.{m[2]}'),
    (r'transformer\.decoder\.norm\.' + _LEAF, r'decoder.norm.\1'),
    (r'transformer\.enc_output\.' + _LEAF, r'memory_trans_fc.\1'),
    (r'transformer\.enc_output_norm\.' + _LEAF, r'memory_trans_norm.\1'),
    (r'transformer\.pos_trans\.' + _LEAF, r'pos_trans_fc.\1'),
    (r'transformer\.pos_trans_norm\.' + _LEAF, r'pos_trans_norm.\1'),
    (r'transformer\.query_embed\.weight', 'query_embedding.weight'),
    (r'(cls_branches|reg_branches)\.(.+)', r'bbox_head.\1.\2'),
    (r'dn_generator\.label_embedding\.weight', 'dn_query_generator.label_embedding.weight'),
]


def _mmdet_codetr_layout(name, signature, base, own):
    """A Co-DETR query head's file: ``own`` rules first, then the shared ones; the query
    head's remaining keys renamed to MMDetection 3's names and converted by ``base``."""
    def via_base(key):
        new, matched = base.rename(key)
        return new if matched else key

    def translated(pattern, repl):
        def rename(m):
            inner = re.fullmatch(pattern, m[1])
            return via_base(repl(inner) if callable(repl) else inner.expand(repl))
        return rename

    return Layout(
        name, signature,
        own + [(r'query_head\.transformer\.(aux_pos_trans|aux_pos_trans_norm)\.(\d+)\.' + _LEAF,
                r'bbox_head.\1.\2.\3'),
               (r'query_head\.downsample\.(0|1)\.' + _LEAF, r'bbox_head.aux_downsample.\1.\2'),
               (r'bbox_head\.(\d+)\.(.+)', r'bbox_head.aux_heads.\1.\2'),
               (r'((?:backbone|neck)\..+)', lambda m: via_base(m[1]))]
        + [(r'query_head\.(' + pattern + ')', translated(pattern, repl))
           for pattern, repl in _TO_DINO],
        post=base.post)


def mmdet_codino_layout(num_convs):
    """``num_convs``: the ChannelMapper's 1x1 convs (its extra convs follow them)."""
    return _mmdet_codetr_layout('MMDetection Co-DINO', r'^query_head\.transformer\.aux_pos_trans\.',
                                mmdet_layout(True, num_convs, dino=True), [])


def codeformdetr_layout(num_convs):
    """The authors' Co-Deformable-DETR (see the module docstring)."""
    own = [(r'query_head\.query_embedding\.weight', 'bbox_head.content_embed.weight'),
           (r'query_head\.transformer\.pos_feats_(trans|norm)\.(\d+)\.' + _LEAF,
            lambda m: f'bbox_head.aux_feat_trans{"" if m[1] == "trans" else "_norm"}.{m[2]}.{m[3]}'),
           (r'query_head\.transformer\.head_pos_embed\.weight', 'bbox_head.aux_head_embed.weight')]
    return _mmdet_codetr_layout('Co-DETR Co-Deformable-DETR', r'^query_head\.transformer\.pos_trans\.',
                                mmdet_layout(True, num_convs), own)


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.convert`)."""
    num_convs = len({k.split('.')[2] for k in state_dict if k.startswith('neck.convs.')})
    return [mmdet_codino_layout(num_convs), codeformdetr_layout(num_convs)]
