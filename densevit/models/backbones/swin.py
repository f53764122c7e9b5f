"""Swin Transformer backbone (Liu et al. 2021, "Hierarchical Vision Transformer using Shifted
Windows")."""

import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from densevit.checkpoint.pretrained import loads_pretrained
from densevit.checkpoint.swin import convert_swin
from densevit.models.layers.patch_embed import PatchEmbed
from densevit.models.layers.pos_embed_builder import (
    build_position_embedding,
    parse_position_embedding_cfg,
)
from densevit.models.layers.swin_block import SwinStage
from densevit.models.layers.window_attention import round_up
from densevit.registry import MODELS

from .freeze import freeze
from .init import init_linear_or_norm

# Swin paper, Sec. 3.3: C, blocks per stage, heads per stage (head width 32).
ARCH_SETTINGS = {
    'T': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    'S': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
    'B': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    'L': dict(embed_dims=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48)),
}
_ARCH_ALIASES = {'t': 'T', 'tiny': 'T', 's': 'S', 'small': 'S', 'b': 'B', 'base': 'B',
                 'l': 'L', 'large': 'L'}


def _arch_setting(arch):
    if isinstance(arch, str):
        name = _ARCH_ALIASES.get(arch.lower())
        if name is None:
            raise KeyError(f'Unknown Swin arch {arch!r}; choose from {list(_ARCH_ALIASES)} '
                           f'or give a dict(embed_dims, depths, num_heads)')
        return dict(ARCH_SETTINGS[name])
    missing = {'embed_dims', 'depths', 'num_heads'} - set(arch)
    if missing:
        raise KeyError(f'Swin arch dict misses {sorted(missing)}')
    if len(arch['depths']) != len(arch['num_heads']):
        raise ValueError('Swin arch: depths and num_heads need one entry per stage')
    return dict(arch)


def _output_norm_keys(model):
    # ImageNet checkpoints have at most one final norm (official / timm / HF: mapped
    # to the last stage's; MMSegmentation's ImageNet files: unused, see
    # densevit/checkpoint/swin.py); the outputs' norms exist only in dense-prediction
    # backbones, and start as identity.
    return tuple(f'norm{i}.' for i in model.out_indices)


@MODELS.register_module()
class SwinTransformer(BaseModule):
    """Swin Transformer returning the (normalised) output of chosen stages.

    Image -> 4x4 patch partition + LayerNorm -> 4 stages of (shifted-)window
    blocks, stage i at stride 4 * 2^i with C * 2^i channels; patch merging
    between stages. Each returned stage output gets its own LayerNorm
    (``norm{i}``). Any input size runs: the image is padded to a multiple of
    the patch size, each stage's map to whole windows (padding cropped after
    attention), odd maps by one row / column before merging.

    Args:
        arch (str | dict): 'tiny' / 'small' / 'base' / 'large' (or T/S/B/L), or
            ``dict(embed_dims, depths, num_heads)``.
        pretrain_img_size (int | tuple[int, int]): image size an absolute
            position table is made for (resized to other inputs).
        patch_size (int): 4.
        in_channels (int): image channels.
        window_size (int): M (7; 12 for the 384-pixel checkpoints).
        mlp_ratio (float): MLP width / C.
        qkv_bias (bool): bias on the qkv projections.
        drop_rate, attn_drop_rate (float): dropout after projections / on attention.
        drop_path_rate (float): stochastic depth, rising linearly over all blocks.
        out_indices (Sequence[int]): stages returned, in order.
        use_abs_pos_embed (bool | str | dict): an absolute position embedding
            added after the patch embedding (Swin's optional ``ape``). True is
            ``'learned_1d'``; any absolute type of the position family
            (``learned_1d``, ``learned_2d``, ``sincos_2d``) may be named. Only
            placement 'stem' applies: token width and grid change per stage.
        always_shift (bool): True (default): every second block of a stage shifts its
            windows, whatever the map size (the dense-prediction codes: MMSegmentation,
            MMDetection, HF ``SwinBackbone``). False: a stage whose map's shorter side is
            no longer than the window does not shift (Swin's classifiers: official and
            timm at their training size, HF ``SwinModel``; e.g. the 7x7 last stage at
            224). A checkpoint never changes it; where its origin used the other rule,
            one WARNING line names both.
        with_cp (bool): gradient checkpointing of every block (saves memory).
        frozen_stages (int): -1 trains all; 0 freezes the patch embedding (and
            absolute position table); k > 0 also stages 0..k-1 with their merging
            layers and output norms.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)``
            loads official / HF / timm Swin checkpoints (converted, reported).

    Shapes:
        x: [B, C_in, H, W] -> tuple of [B, C * 2^i, h_i, w_i] for i in
        ``out_indices``, h_0 = ceil(H / 4), h_{i+1} = ceil(h_i / 2).
    """

    def __init__(self, arch='tiny', pretrain_img_size=224, patch_size=4, in_channels=3,
                 window_size=7, mlp_ratio=4., qkv_bias=True, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0.1, out_indices=(0, 1, 2, 3), use_abs_pos_embed=False,
                 always_shift=True, with_cp=False, frozen_stages=-1, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        setting = _arch_setting(arch)
        C, depths, heads = setting['embed_dims'], setting['depths'], setting['num_heads']
        num_stages = len(depths)
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        self.patch_size = patch_size

        self.patch_embed = PatchEmbed(in_channels, C, patch_size, norm_cfg=dict(type='LN'))
        self.absolute_pos_embed = self._build_abs_pos_embed(
            use_abs_pos_embed, C, (pretrain_img_size[0] // patch_size,
                                   pretrain_img_size[1] // patch_size))
        self.pos_drop = nn.Dropout(drop_rate)

        # Plain Python, not torch.linspace: the model must also build on device='meta'.
        total = sum(depths)
        dpr = [drop_path_rate * i / max(total - 1, 1) for i in range(total)]
        self.layers = nn.ModuleList()
        for i in range(num_stages):
            first = sum(depths[:i])
            self.layers.append(SwinStage(
                C * 2 ** i, depths[i], heads[i], window_size,
                drop_path_rates=dpr[first:first + depths[i]], downsample=i < num_stages - 1,
                with_cp=with_cp, always_shift=bool(always_shift), mlp_ratio=mlp_ratio,
                qkv_bias=qkv_bias, drop_rate=drop_rate, attn_drop_rate=attn_drop_rate))

        self.out_indices = [i % num_stages for i in out_indices]
        if not self.out_indices or any(not -num_stages <= i < num_stages for i in out_indices):
            raise IndexError(f'out_indices {out_indices} out of range for {num_stages} stages')
        for i in self.out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(C * 2 ** i))
        self.out_channels = [C * 2 ** i for i in self.out_indices]
        self.out_strides = [patch_size * 2 ** i for i in self.out_indices]

        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {num_stages}]')
        self.frozen_stages = frozen_stages
        self._freeze_stages()

    @property
    def always_shift(self):
        """Whether small maps are shifted too (see the class docstring); settable."""
        return self.layers[0].blocks[0].always_shift

    @always_shift.setter
    def always_shift(self, value):
        for stage in self.layers:
            for block in stage.blocks:
                block.always_shift = bool(value)

    @staticmethod
    def _build_abs_pos_embed(cfg, embed_dims, grid_hw):
        if cfg is False or cfg is None:
            return None
        cfg = 'learned_1d' if cfg is True else cfg
        pe_type, placement, _ = parse_position_embedding_cfg(cfg)
        if pe_type == 'none':
            return None
        if pe_type in ('relative', 'sine_2d') or placement != 'stem':
            raise ValueError(f'Swin use_abs_pos_embed: only absolute types at placement '
                             f"'stem' apply (got type {pe_type!r}, placement {placement!r}); "
                             f'Swin blocks already carry a relative position bias')
        return build_position_embedding(cfg, embed_dims, grid_hw, num_extra_tokens=0)

    def _frozen_modules(self):
        k = self.frozen_stages
        if k < 0:
            return []
        mods = [self.patch_embed] + ([self.absolute_pos_embed] if self.absolute_pos_embed else [])
        mods += list(self.layers[:k])
        mods += [getattr(self, f'norm{i}') for i in self.out_indices if i < k]
        return mods

    def _freeze_stages(self):
        freeze(self._frozen_modules())

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        return self

    @loads_pretrained(convert_swin, expected_missing=_output_norm_keys)
    def init_weights(self):
        """Swin init: truncated normal (std .02) for Linear weights and bias tables,
        zero biases, LayerNorm to identity; then ``init_cfg`` (Pretrained: converted
        and loaded by :func:`densevit.checkpoint.pretrained.load_pretrained`)."""
        if not self._is_init:
            for m in self.modules():
                if init_linear_or_norm(m):
                    continue
                if m is not self and hasattr(m, 'init_weights') and not isinstance(m, BaseModule):
                    m.init_weights()  # relative bias tables, position tables
        super().init_weights()

    def forward(self, x):
        """x: [B, C_in, H, W] -> tuple of NCHW maps (see class docstring)."""
        P = self.patch_size
        H, W = x.shape[-2:]
        x = F.pad(x, (0, round_up(W, P) - W, 0, round_up(H, P) - H))
        x, hw = self.patch_embed(x)  # [B, h*w, C]
        if self.absolute_pos_embed is not None:
            x = self.absolute_pos_embed(x, hw)
        x = self.pos_drop(x)

        outs = {}
        for i, stage in enumerate(self.layers[:max(self.out_indices) + 1]):
            out, out_hw, x, merged_hw = stage(x, hw)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(out)
                outs[i] = out.transpose(1, 2).reshape(out.shape[0], -1, *out_hw).contiguous()
            hw = merged_hw
        return tuple(outs[i] for i in self.out_indices)
