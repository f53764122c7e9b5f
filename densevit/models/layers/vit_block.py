"""The pre-norm Transformer encoder layer of ViT (Dosovitskiy et al. 2021, Eq. 2-3)."""
import torch
from mmcv.cnn import build_activation_layer
from mmcv.cnn.bricks import DropPath
from torch import nn

from . import quick_gelu  # noqa: F401  registers activation type 'QuickGELU'
from .attention import MultiheadAttention
from .layer_scale import LayerScale
from .swiglu import GEGLU, SwiGLU
from .vitdet_attention import WindowedAttention

FFN_TYPES = {'mlp': None, 'swiglu': SwiGLU, 'geglu': GEGLU}  # None: Mlp, below


class Mlp(nn.Module):
    """Two-layer MLP: Linear(D, F) -> GELU -> dropout -> Linear(F, D) -> dropout.

    ``act_cfg`` (mmcv's ``build_activation_layer``) replaces the GELU, e.g.
    ``dict(type='QuickGELU')`` (CLIP's); None keeps GELU.

    Shapes: [..., D] -> [..., D].
    """

    def __init__(self, embed_dims, feedforward_channels, drop=0., act_cfg=None):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, feedforward_channels)
        self.act = nn.GELU() if act_cfg is None else build_activation_layer(act_cfg)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(feedforward_channels, embed_dims)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class TransformerEncoderLayer(nn.Module):
    """Pre-norm encoder layer: ``x + MSA(LN(x))`` then ``x + MLP(LN(x))``; with layer
    scale ``x + gamma1 * MSA(LN(x))`` then ``x + gamma2 * FFN(LN(x))``.

    Normalising before each sub-layer (not after, as in the original
    Transformer) keeps the residual stream un-normalised, which is what lets
    deep ViTs train without warm-up tricks; the backbone therefore adds one
    final LayerNorm after the last layer.

    Args:
        embed_dims (int): token width D.
        num_heads (int): attention heads.
        feedforward_channels (int, optional): MLP hidden width F; defaults to
            ``mlp_ratio * embed_dims``.
        mlp_ratio (float): used only when ``feedforward_channels`` is None.
        drop_rate (float): dropout after the attention projection and in the MLP.
        attn_drop_rate (float): dropout on attention weights.
        drop_path_rate (float): stochastic depth of both residual branches.
        qkv_bias (bool | tuple[bool, bool, bool]): bias on the qkv projection, or on
            each of q, k, v (:class:`~.attention.MultiheadAttention`).
        norm_eps (float): LayerNorm epsilon (1e-6 as in the JAX/timm ViT).
        layer_scale_init_value (float, optional): LayerScale (CaiT) on both residual
            branches, ``gamma`` starting at this value (``ls1``, ``ls2``); None or 0: none.
        ffn_type (str): 'mlp' (:class:`Mlp`), 'swiglu' (:class:`~.swiglu.SwiGLU`) or
            'geglu' (:class:`~.swiglu.GEGLU`); all name their layers ``mlp.fc1`` /
            ``mlp.fc2``.
        glu_hidden (str): a gated layer's hidden width from ``feedforward_channels``:
            'two_thirds' (DINOv2's rule) or 'full' (see :class:`~.swiglu.SwiGLU`).
        act_cfg (dict, optional): the activation of ``ffn_type='mlp'`` (:class:`Mlp`), e.g.
            ``dict(type='QuickGELU')``; None: GELU. The gated layers bring their own.
        window_size (int): attention in windows of this many patches a side (ViTDet / SAM;
            :class:`~.vitdet_attention.WindowedAttention`); 0: over all tokens.
        rel_pos_hw (tuple[int, int], optional): the span of decomposed relative position
            tables (``attn.rel_pos_h`` / ``rel_pos_w``); None: none. Either option makes the
            layer attend over the patch grid given as ``hw`` (no class token).

    Shapes: x [B, N, D] -> [B, N, D].
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels=None, mlp_ratio=4.,
                 drop_rate=0., attn_drop_rate=0., drop_path_rate=0., qkv_bias=True,
                 norm_eps=1e-6, layer_scale_init_value=None, ffn_type='mlp',
                 glu_hidden='two_thirds', act_cfg=None, window_size=0, rel_pos_hw=None):
        super().__init__()
        if ffn_type not in FFN_TYPES:
            raise ValueError(f'Unknown ffn_type {ffn_type!r}; choose from {tuple(FFN_TYPES)}')
        if act_cfg is not None and ffn_type != 'mlp':
            raise ValueError(f'act_cfg sets the activation of the plain MLP; '
                             f'ffn_type={ffn_type!r} is gated with its own')
        if feedforward_channels is None:
            feedforward_channels = int(embed_dims * mlp_ratio)
        self.norm1 = nn.LayerNorm(embed_dims, eps=norm_eps)
        attn = dict(qkv_bias=qkv_bias, attn_drop=attn_drop_rate, proj_drop=drop_rate)
        if window_size or rel_pos_hw is not None:  # ViTDet / SAM
            self.attn = WindowedAttention(embed_dims, num_heads, window_size=window_size,
                                          rel_pos_hw=rel_pos_hw, **attn)
        else:
            self.attn = MultiheadAttention(embed_dims, num_heads, **attn)
        scale = layer_scale_init_value
        self.ls1 = LayerScale(embed_dims, scale) if scale else nn.Identity()
        self.norm2 = nn.LayerNorm(embed_dims, eps=norm_eps)
        gated = FFN_TYPES[ffn_type]
        self.mlp = (Mlp(embed_dims, feedforward_channels, drop=drop_rate, act_cfg=act_cfg)
                    if gated is None else
                    gated(embed_dims, feedforward_channels, drop=drop_rate, hidden=glu_hidden))
        self.ls2 = LayerScale(embed_dims, scale) if scale else nn.Identity()
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, attn_mask=None, rope=None, hw=None) -> torch.Tensor:
        """x: [B, N, D]; attn_mask, rope, hw (the patch grid): see
        ``MultiheadAttention.forward``."""
        x = x + self.drop_path(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask,
                                                  rope=rope, hw=hw)))
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        return x
