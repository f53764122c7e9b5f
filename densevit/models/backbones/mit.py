"""Mix Transformer (MiT), SegFormer's hierarchical encoder (Xie et al. 2021, "SegFormer", Sec. 3.1).

Four stages, each: overlapping patch embedding (a strided conv that also
downsamples) -> blocks of efficient self-attention + Mix-FFN -> LayerNorm.
No position embedding: the 3x3 depthwise conv inside Mix-FFN leaks enough
location information, so the encoder runs at any input size unchanged.

Parameter names follow the official code under a regular ``stages.{i}``
tree; ``densevit/checkpoint/mit.py`` maps official, Hugging Face and
MMSegmentation checkpoints, and tells the LayerNorm eps each origin used (compared
with this model's ``layer_norm_eps``, which a checkpoint never changes). A Pretrained
``init_cfg`` (e.g. ``checkpoint='mit_b0.pth'``, read safely and reported by
``densevit.checkpoint.pretrained.load_pretrained``), ``load_from`` and ``init_model``
convert such a checkpoint; ``load_state_dict`` takes densevit's own layout only.
"""
import math
from collections.abc import Sequence

import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from torch import nn
from torch.utils.checkpoint import checkpoint

from densevit.checkpoint.mit import OFFICIAL_LAYER_NORM_EPS, convert_mit
from densevit.checkpoint.pretrained import loads_pretrained
from densevit.registry import MODELS

from .init import init_linear_or_norm

# Paper Table 6 (and the official code): stage widths and depths per size.
# Heads (1, 2, 5, 8), sr ratios (8, 4, 2, 1) and MLP ratio 4 are shared.
ARCH_SETTINGS = {
    'b0': dict(embed_dims=[32, 64, 160, 256], num_layers=[2, 2, 2, 2]),
    'b1': dict(embed_dims=[64, 128, 320, 512], num_layers=[2, 2, 2, 2]),
    'b2': dict(embed_dims=[64, 128, 320, 512], num_layers=[3, 4, 6, 3]),
    'b3': dict(embed_dims=[64, 128, 320, 512], num_layers=[3, 4, 18, 3]),
    'b4': dict(embed_dims=[64, 128, 320, 512], num_layers=[3, 8, 27, 3]),
    'b5': dict(embed_dims=[64, 128, 320, 512], num_layers=[3, 6, 40, 3]),
}


class OverlapPatchEmbed(nn.Module):
    """Conv with kernel k > stride s and padding k // 2, then LayerNorm on tokens.

    Unlike ViT's non-overlapping patches, neighbouring patches share pixels,
    which keeps local continuity across patch borders (paper Sec. 3.1).
    The output grid is floor((H + 2*(k//2) - k) / s) + 1, so any H, W work.

    Shapes: x [B, C, H, W] -> (tokens [B, h*w, D], (h, w)).
    """

    def __init__(self, in_channels, embed_dims, patch_size, stride, eps=1e-5):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dims, patch_size, stride, patch_size // 2)
        self.norm = nn.LayerNorm(embed_dims, eps=eps)

    def forward(self, x):
        x = self.proj(x)
        hw = x.shape[-2:]
        return self.norm(x.flatten(2).transpose(1, 2)), tuple(hw)


class EfficientSelfAttention(nn.Module):
    """Multi-head attention whose keys/values come from a spatially reduced map (Eq. 2).

    Queries keep all N = h*w tokens; keys and values are computed from the
    map shrunk by a conv with kernel = stride = R (then LayerNorm), i.e.
    N / R^2 tokens, so the cost drops from O(N^2) to O(N^2 / R^2) — what
    makes attention affordable at stride 4.

    Shapes: x [B, N, C], hw = (h, w) -> [B, N, C].
    """

    def __init__(self, embed_dims, num_heads, sr_ratio=1, qkv_bias=True, attn_drop=0.,
                 proj_drop=0., eps=1e-5):
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by '
                             f'num_heads ({num_heads})')
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)  # [k; v] stacked
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = nn.LayerNorm(embed_dims, eps=eps)

    def _split_heads(self, t):
        """[B, M, C] -> [B, heads, M, C / heads]."""
        B, M, C = t.shape
        return t.reshape(B, M, self.num_heads, C // self.num_heads).transpose(1, 2)

    def forward(self, x, hw):
        B, N, C = x.shape
        q = self._split_heads(self.q(x))  # [B, h, N, C/h]
        if self.sr_ratio > 1:
            x = x.transpose(1, 2).reshape(B, C, *hw)
            x = self.norm(self.sr(x).flatten(2).transpose(1, 2))  # [B, N/R^2, C]
        k, v = map(self._split_heads, self.kv(x).chunk(2, dim=-1))  # kv rows: [k; v]
        x = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class MixFFN(nn.Module):
    """Linear -> 3x3 depthwise conv -> GELU -> Linear (Eq. 3).

    Shapes: x [B, N, C], hw = (h, w) -> [B, N, C].
    """

    def __init__(self, embed_dims, feedforward_channels, drop=0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, feedforward_channels)
        self.dwconv = nn.Conv2d(feedforward_channels, feedforward_channels, 3, 1, 1,
                                groups=feedforward_channels)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(feedforward_channels, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x, hw):
        x = self.fc1(x)
        B, N, C = x.shape
        x = self.dwconv(x.transpose(1, 2).reshape(B, C, *hw)).flatten(2).transpose(1, 2)
        x = self.drop(self.act(x))
        return self.drop(self.fc2(x))


class MiTBlock(nn.Module):
    """Pre-norm block: ``x + Attn(LN(x))`` then ``x + MixFFN(LN(x))``.

    ``eps``: LayerNorm eps per kind, ``{'sr': ..., 'block': ...}`` (the key/value
    reduction's norm and norm1 / norm2).

    Shapes: x [B, N, C], hw = (h, w) -> [B, N, C].
    """

    def __init__(self, embed_dims, num_heads, mlp_ratio=4, sr_ratio=1, qkv_bias=True,
                 drop_rate=0., attn_drop_rate=0., drop_path_rate=0., eps=None):
        super().__init__()
        eps = eps or OFFICIAL_LAYER_NORM_EPS
        self.norm1 = nn.LayerNorm(embed_dims, eps=eps['block'])
        self.attn = EfficientSelfAttention(embed_dims, num_heads, sr_ratio, qkv_bias,
                                           attn_drop_rate, drop_rate, eps['sr'])
        self.norm2 = nn.LayerNorm(embed_dims, eps=eps['block'])
        self.mlp = MixFFN(embed_dims, int(embed_dims * mlp_ratio), drop_rate)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x, hw):
        x = x + self.drop_path(self.attn(self.norm1(x), hw))
        return x + self.drop_path(self.mlp(self.norm2(x), hw))


class MiTStage(nn.Module):
    """Patch embedding -> blocks -> LayerNorm -> NCHW map (``eps``: as :class:`MiTBlock`,
    plus ``patch_embed`` and ``stage``, the final norm's).

    Shapes: x [B, C_in, H, W] -> [B, C, H/s, W/s] (s = patch-embedding stride).
    """

    def __init__(self, in_channels, embed_dims, num_layers, num_heads, patch_size, stride,
                 sr_ratio, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, drop_path_rates,
                 with_cp=False, eps=None):
        super().__init__()
        eps = eps or OFFICIAL_LAYER_NORM_EPS
        self.with_cp = with_cp
        self.patch_embed = OverlapPatchEmbed(in_channels, embed_dims, patch_size, stride,
                                             eps['patch_embed'])
        self.blocks = nn.ModuleList(
            MiTBlock(embed_dims, num_heads, mlp_ratio, sr_ratio, qkv_bias, drop_rate,
                     attn_drop_rate, drop_path_rates[j], eps)
            for j in range(num_layers))
        self.norm = nn.LayerNorm(embed_dims, eps=eps['stage'])

    def layer_norms(self):
        """``(kind, LayerNorm)`` for every LayerNorm of the stage (kinds as ``eps``)."""
        yield 'patch_embed', self.patch_embed.norm
        for block in self.blocks:
            if block.attn.sr_ratio > 1:
                yield 'sr', block.attn.norm
            yield 'block', block.norm1
            yield 'block', block.norm2
        yield 'stage', self.norm

    def forward(self, x):
        B = x.shape[0]
        x, hw = self.patch_embed(x)
        for block in self.blocks:
            if self.with_cp and x.requires_grad:
                # Recompute activations in backward: memory for compute.
                x = checkpoint(block, x, hw, use_reentrant=False)
            else:
                x = block(x, hw)
        x = self.norm(x)
        return x.transpose(1, 2).reshape(B, -1, *hw).contiguous()


def _resolve_eps(value):
    """``layer_norm_eps`` -> ``{kind: eps}`` for every kind of LayerNorm."""
    if value is None:
        return dict(OFFICIAL_LAYER_NORM_EPS)
    if isinstance(value, (int, float)):
        return dict.fromkeys(OFFICIAL_LAYER_NORM_EPS, float(value))
    unknown = set(value) - set(OFFICIAL_LAYER_NORM_EPS)
    if unknown:
        raise KeyError(f'MixVisionTransformer: layer_norm_eps has unknown kind(s) '
                       f'{sorted(unknown)}; kinds: {list(OFFICIAL_LAYER_NORM_EPS)}')
    return {**OFFICIAL_LAYER_NORM_EPS, **value}


def _per_stage(value, num_stages, name):
    """An int/float for every stage, or a sequence with one entry per stage."""
    if not isinstance(value, Sequence):
        return [value] * num_stages
    if len(value) < num_stages:
        raise ValueError(f'MixVisionTransformer: {name} has {len(value)} entries, '
                         f'need {num_stages} (one per stage)')
    return list(value[:num_stages])


@MODELS.register_module()
class MixVisionTransformer(BaseModule):
    """MiT encoder returning the stage outputs (strides 4, 8, 16, 32).

    Args:
        arch (str | None): 'b0'..'b5' (widths and depths of the paper), or
            None to give ``embed_dims`` and ``num_layers`` explicitly.
        in_channels (int): image channels.
        embed_dims (int | Sequence[int], optional): stage widths; overrides
            ``arch``. An int is mmseg's convention: width of stage i is
            ``embed_dims * num_heads[i]`` (32 -> B0, 64 -> B1..B5).
        num_stages (int): number of stages.
        num_layers (Sequence[int], optional): blocks per stage; overrides ``arch``.
        num_heads (Sequence[int]): attention heads per stage.
        patch_sizes (Sequence[int]): patch-embedding kernel per stage.
        strides (Sequence[int]): patch-embedding stride per stage.
        sr_ratios (Sequence[int]): key/value spatial reduction R per stage.
        out_indices (int | Sequence[int]): stages to return (0-based).
        mlp_ratio (float | Sequence[float]): Mix-FFN hidden width / C.
        qkv_bias (bool): bias on the q and kv projections.
        drop_rate (float): dropout after attention projection and in Mix-FFN.
        attn_drop_rate (float): dropout on attention weights.
        drop_path_rate (float): stochastic depth, linear from 0 at the first
            block to this value at the last (over all stages).
        with_cp (bool): gradient checkpointing of every block (training only).
        layer_norm_eps (float | dict | None): LayerNorm eps, one float for all, or per
            kind: ``patch_embed`` (patch embeddings), ``sr`` (key/value reduction),
            ``block`` (norm1 / norm2), ``stage`` (stage-final norms); missing kinds keep
            the official values. None (default): the official code's mix (1e-5 for
            ``patch_embed`` and ``sr``, 1e-6 for ``block`` and ``stage``). HF used 1e-5
            everywhere, MMSegmentation 1e-6 everywhere: set that value to reproduce
            their models exactly (a checkpoint never changes it; where its origin
            differs, one WARNING line names both).
        init_cfg (dict, optional): e.g. ``dict(type='Pretrained', checkpoint=...)``;
            official, HF and MMSegmentation key layouts are converted on load.

    Attributes:
        out_channels (list[int]), out_strides (list[int]): per returned map.

    Shapes:
        x [B, C, H, W] -> tuple of [B, C_i, ~H/s_i, ~W/s_i] for i in out_indices
        (each stage rounds up: h -> floor((h - 1) / stride) + 1).
    """

    def __init__(self, arch='b0', in_channels=3, embed_dims=None, num_stages=4, num_layers=None,
                 num_heads=(1, 2, 5, 8), patch_sizes=(7, 3, 3, 3), strides=(4, 2, 2, 2),
                 sr_ratios=(8, 4, 2, 1), out_indices=(0, 1, 2, 3), mlp_ratio=4, qkv_bias=True,
                 drop_rate=0., attn_drop_rate=0., drop_path_rate=0.1, with_cp=False,
                 layer_norm_eps=None, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        setting = {}
        if arch is not None:
            if str(arch).lower() not in ARCH_SETTINGS:
                raise KeyError(f'Unknown MiT arch {arch!r}; choose from '
                               f'{list(ARCH_SETTINGS)} or pass arch=None with '
                               f'embed_dims and num_layers')
            setting = ARCH_SETTINGS[str(arch).lower()]
        embed_dims = setting.get('embed_dims') if embed_dims is None else embed_dims
        num_layers = setting.get('num_layers') if num_layers is None else num_layers
        if embed_dims is None or num_layers is None:
            raise ValueError('MixVisionTransformer: give arch, or embed_dims and num_layers')
        num_heads = _per_stage(num_heads, num_stages, 'num_heads')
        if isinstance(embed_dims, int):
            embed_dims = [embed_dims * h for h in num_heads]
        self.embed_dims = _per_stage(embed_dims, num_stages, 'embed_dims')
        self.num_layers = _per_stage(num_layers, num_stages, 'num_layers')
        patch_sizes = _per_stage(patch_sizes, num_stages, 'patch_sizes')
        strides = _per_stage(strides, num_stages, 'strides')
        sr_ratios = _per_stage(sr_ratios, num_stages, 'sr_ratios')
        mlp_ratios = _per_stage(mlp_ratio, num_stages, 'mlp_ratio')
        self.num_stages = num_stages
        eps = _resolve_eps(layer_norm_eps)

        total = sum(self.num_layers)
        # Plain Python, not torch.linspace: the model must also build on device='meta'.
        dpr = [drop_path_rate * i / max(total - 1, 1) for i in range(total)]
        self.stages = nn.ModuleList()
        start = 0
        for i in range(num_stages):
            n = self.num_layers[i]
            self.stages.append(MiTStage(
                in_channels if i == 0 else self.embed_dims[i - 1], self.embed_dims[i], n,
                num_heads[i], patch_sizes[i], strides[i], sr_ratios[i], mlp_ratios[i],
                qkv_bias, drop_rate, attn_drop_rate, dpr[start:start + n], with_cp, eps))
            start += n

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        self.out_indices = sorted({i % num_stages for i in out_indices})
        if len(self.out_indices) != len(out_indices) or any(
                not -num_stages <= i < num_stages for i in out_indices):
            raise IndexError(f'out_indices {out_indices} must be distinct stages in '
                             f'[0, {num_stages})')
        cum_strides = [math.prod(strides[:i + 1]) for i in range(num_stages)]
        self.out_channels = [self.embed_dims[i] for i in self.out_indices]
        self.out_strides = [cum_strides[i] for i in self.out_indices]

    @property
    def layer_norm_eps(self):
        """The LayerNorm eps in use, per kind (see the class docstring)."""
        return {kind: norm.eps for stage in self.stages for kind, norm in stage.layer_norms()}

    @loads_pretrained(convert_mit)
    def init_weights(self):
        """Official init: Linear ~ trunc N(0, .02), LayerNorm identity, conv
        ~ N(0, sqrt(2 / fan_out)) (He init over the output fan, per group);
        zero biases. Then a Pretrained ``init_cfg`` (official / HF / densevit
        layout) is converted and loaded by ``densevit.checkpoint.pretrained.load_pretrained``."""
        if not self._is_init:
            for m in self.modules():
                if init_linear_or_norm(m):
                    continue
                if isinstance(m, nn.Conv2d):
                    fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
                    nn.init.normal_(m.weight, 0, math.sqrt(2.0 / fan_out))
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
        super().init_weights()

    def forward(self, x):
        """x [B, C, H, W] -> tuple of NCHW maps (see class docstring)."""
        outs = []
        for i, stage in enumerate(self.stages[:self.out_indices[-1] + 1]):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)
