"""MONAI's ``UNETR(spatial_dims=2)`` (``monai.networks.nets.UNETR``) -> densevit's ``UNETR``
segmentor (a ``VisionTransformer`` backbone and a ``UNETRHead``).

==================================================  ==========================================
MONAI                                               densevit
==================================================  ==========================================
``vit.patch_embedding.patch_embeddings``            ``backbone.patch_embed.proj`` (a Linear on
(``.1`` with ``proj_type='perceptron'``)            16x16 patches becomes the convolution)
``vit.patch_embedding.position_embeddings``         ``backbone.pos_embed.weight`` (no class row)
``vit.blocks.N.{norm1,norm2}``                      ``backbone.blocks.N.{norm1,norm2}``
``vit.blocks.N.attn.{qkv,out_proj}``                ``backbone.blocks.N.attn.{qkv,proj}``
``vit.blocks.N.mlp.{linear1,linear2}``              ``backbone.blocks.N.mlp.{fc1,fc2}``
``vit.norm``                                        ``backbone.norm``
``encoder1.layer``                                  ``decode_head.image_encoder``
``encoder{2,3,4}.transp_conv_init``                 ``decode_head.skip_encoders.{0,1,2}.up``
``encoder{2,3,4}.blocks.J.{0,1}``                   ``...skip_encoders.{0,1,2}.blocks.J.{0,1}``
``decoder{5,4,3,2}.transp_conv``                    ``decode_head.decoders.{0,1,2,3}.up``
``decoder{5,4,3,2}.conv_block``                     ``decode_head.decoders.{0,1,2,3}.block``
``out.conv.conv``                                   ``decode_head.conv_seg``
==================================================  ==========================================

In a conv pair MONAI's ``conv1``, ``conv2``, ``conv3`` (the 1x1 shortcut) are densevit's
``conv1``, ``conv2``, ``shortcut``, each a ``ConvModule`` (``.conv``). Dropped, with the
reason logged: ``vit.blocks.N.norm_cross_attn`` (a LayerNorm every MONAI block builds and
a block without cross-attention never uses) and ``cross_attn.*`` of older MONAI files.

Instance norm as MONAI's UNETR builds it (``norm_name='instance'``: no affine parameters)
has no tensors; a file with norm parameters (``'batch'``, an affine instance norm) is
refused, naming the keys. MONAI's LayerNorms use eps 1e-5 (the layout's option): build the
ViT with ``layer_norm_eps=1e-5``. ``tests/models/test_unetr_vs_monai.py`` proves the
mapping on random weights.
"""
from .layout import Layout, convert_state_dict

PATCH = 16  # MONAI's UNETR fixes the patch size
# MONAI's conv1 / conv2 / conv3 of a conv pair (``UnetResBlock`` / ``UnetBasicBlock``)
_PAIR = {'1': 'conv1', '2': 'conv2', '3': 'shortcut'}


def _pair(src, dst):
    """The rule for a conv pair's convolutions under ``src`` (regex, its last group the
    conv number) -> ``dst(match)`` + the densevit conv name."""
    return (src + r'conv([123])\.conv\.weight',
            lambda m: f'{dst(m)}{_PAIR[m[m.lastindex]]}.conv.weight')


def _skip(m):
    """``encoder{2,3,4}`` -> ``decode_head.skip_encoders.{0,1,2}.``."""
    return f'decode_head.skip_encoders.{int(m[1]) - 2}.'


def _decoder(m):
    """``decoder{5,4,3,2}`` -> ``decode_head.decoders.{0,1,2,3}.``."""
    return f'decode_head.decoders.{5 - int(m[1])}.'


_BLOCK = r'vit\.blocks\.(\d+)\.'
RULES = [
    (r'vit\.patch_embedding\.position_embeddings', 'backbone.pos_embed.weight'),
    (r'vit\.patch_embedding\.patch_embeddings\.(?:1\.)?(weight|bias)',
     r'backbone.patch_embed.proj.\1'),
    (_BLOCK + r'(norm1|norm2)\.(weight|bias)', r'backbone.blocks.\1.\2.\3'),
    (_BLOCK + r'attn\.qkv\.(weight|bias)', r'backbone.blocks.\1.attn.qkv.\2'),
    (_BLOCK + r'attn\.out_proj\.(weight|bias)', r'backbone.blocks.\1.attn.proj.\2'),
    (_BLOCK + r'mlp\.linear([12])\.(weight|bias)', r'backbone.blocks.\1.mlp.fc\2.\3'),
    (r'vit\.norm\.(weight|bias)', r'backbone.norm.\1'),
    _pair(r'encoder1\.layer\.', lambda m: 'decode_head.image_encoder.'),
    (r'encoder([234])\.transp_conv_init\.conv\.weight', lambda m: _skip(m) + 'up.weight'),
    (r'encoder([234])\.blocks\.(\d+)\.(?:0\.)?conv\.weight',
     lambda m: f'{_skip(m)}blocks.{m[2]}.0.weight'),
    _pair(r'encoder([234])\.blocks\.(\d+)\.1\.', lambda m: f'{_skip(m)}blocks.{m[2]}.1.'),
    (r'decoder([2-5])\.transp_conv\.conv\.weight', lambda m: _decoder(m) + 'up.weight'),
    _pair(r'decoder([2-5])\.conv_block\.', lambda m: _decoder(m) + 'block.'),
    (r'out\.conv\.conv\.(weight|bias)', r'decode_head.conv_seg.\1'),
]
DROP = {
    _BLOCK + r'norm_cross_attn\.(weight|bias)':
        'the LayerNorm of cross-attention, which a MONAI ViT block builds and never uses '
        'without it',
    _BLOCK + r'cross_attn\..+': 'cross-attention of older MONAI files, unused by UNETR',
}


def _patch_linear_to_conv(state_dict):
    """``proj_type='perceptron'``: Linear(16*16*C, D) on patches flattened as (p1, p2, c)
    -> the equal convolution weight [D, C, 16, 16]."""
    key = 'backbone.patch_embed.proj.weight'
    weight = state_dict.get(key)
    if weight is not None and weight.dim() == 2:
        D = weight.shape[0]
        state_dict[key] = weight.reshape(D, PATCH, PATCH, -1).permute(0, 3, 1, 2).contiguous()
    return state_dict


LAYOUT = Layout('MONAI UNETR', r'^vit\.patch_embedding\.', RULES, DROP,
                post=_patch_linear_to_conv, options={'layer_norm_eps': 1e-5})


def convert_monai_unetr(state_dict):
    """MONAI ``UNETR(spatial_dims=2)`` state dict -> densevit ``UNETR`` state dict (strict:
    a key without a rule is refused, naming it)."""
    return convert_state_dict(state_dict, [LAYOUT], 'MONAI UNETR', strict=True)
