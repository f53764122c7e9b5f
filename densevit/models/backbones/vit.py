"""Plain Vision Transformer backbone (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

Also the paper's hybrid (Sec. 3.1): a CNN stem's feature map is cut into
patches (usually of size 1) instead of the image; DINOv2's ViT (Oquab et al. 2024):
register tokens (Darcet et al. 2024), LayerScale (Touvron et al. 2021, CaiT), a SwiGLU
feed-forward layer (Shazeer 2020), patch size 14; and DINOv3's (Simeoni et al. 2025): the
same with 2-D RoPE instead of a position table, no key bias, and in some sizes SwiGLU of a
given hidden width. BEiT's (Bao et al. 2022) and Data2VecVision's: no key bias, LayerScale and a
relative position bias per layer or shared (``pos_embed`` type ``relative``); CLIP's image tower
(Radford et al. 2021): a LayerNorm before the first layer (``pre_norm``) and QuickGELU
(``act_cfg``).
"""
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.model import BaseModule
from torch import nn
from torch.utils.checkpoint import checkpoint

from densevit.checkpoint.beit import spread_shared_bias
from densevit.checkpoint.pretrained import loads_pretrained, split_pretrained
from densevit.checkpoint.vit import check_vit_size, checkpoint_grid, convert_vit
from densevit.models.layers.attention import qkv_bias_parts
from densevit.models.layers.patch_embed import PatchEmbed
from densevit.models.layers.pos_embed import LearnedPositionEmbedding
from densevit.models.layers.pos_embed_builder import (
    build_position_embedding,
    parse_position_embedding_cfg,
)
from densevit.models.layers.token_select import (
    gather_tokens,
    select_bias,
    select_rotation,
    select_table,
)
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT, resolve_default

from .freeze import freeze
from .init import init_linear_or_norm
from .vit_windows import grid_layer_options, rel_pos_keys, uses_grid_layers

# ViT paper, Table 1 (Ti and S from DeiT): width D, depth, heads, MLP size.
ARCH_SETTINGS = {
    'Ti': dict(embed_dims=192, num_layers=12, num_heads=3, feedforward_channels=768),
    'S': dict(embed_dims=384, num_layers=12, num_heads=6, feedforward_channels=1536),
    'B': dict(embed_dims=768, num_layers=12, num_heads=12, feedforward_channels=3072),
    'L': dict(embed_dims=1024, num_layers=24, num_heads=16, feedforward_channels=4096),
    'H': dict(embed_dims=1280, num_layers=32, num_heads=16, feedforward_channels=5120),
}
_ARCH_ALIASES = {'ti': 'Ti', 'tiny': 'Ti', 's': 'S', 'small': 'S', 'b': 'B', 'base': 'B',
                 'l': 'L', 'large': 'L', 'h': 'H', 'huge': 'H'}


def _has_class_row(rows, grid_hw):
    """Whether a table of ``rows`` rows is a class-token row plus a grid: one more row
    than this model's grid ``grid_hw``, or than a square grid (when ``rows`` is not
    itself this model's grid or a square)."""
    cells = grid_hw[0] * grid_hw[1]
    if rows == cells or math.isqrt(rows) ** 2 == rows:
        return False
    return rows - 1 == cells or math.isqrt(rows - 1) ** 2 == rows - 1


def _arch_setting(arch):
    if isinstance(arch, str):
        name = _ARCH_ALIASES.get(arch.lower())
        if name is None:
            raise KeyError(f'Unknown ViT arch {arch!r}; choose from {list(ARCH_SETTINGS)} '
                           f'or give a dict')
        return dict(ARCH_SETTINGS[name])
    required = {'embed_dims', 'num_layers', 'num_heads', 'feedforward_channels'}
    missing = required - set(arch)
    if missing:
        raise KeyError(f'ViT arch dict misses {sorted(missing)}')
    return dict(arch)


def _pretrained_grid(init_cfg):
    """``pos_grid='checkpoint'``: the grid of the Pretrained file's position table."""
    pretrained, _ = split_pretrained(init_cfg)
    if pretrained is None:
        raise ValueError("pos_grid='checkpoint' needs init_cfg=dict(type='Pretrained', "
                         "checkpoint=...) to read the grid from")
    return checkpoint_grid(pretrained['checkpoint'], pretrained.get('prefix'))


@MODELS.register_module()
class VisionTransformer(BaseModule):
    """ViT encoder returning the patch tokens of chosen layers as feature maps.

    Image -> [CNN stem] -> PxP patch embedding -> [cls] + tokens -> + position
    embedding -> [cls] + [registers] + tokens -> L pre-norm encoder layers -> (final
    LayerNorm). No classification head: a dense-prediction neck/head reads the maps.

    Args:
        arch (str | dict): 'Ti', 'S', 'B', 'L', 'H', or a dict with
            ``embed_dims, num_layers, num_heads, feedforward_channels``.
        img_size (int | tuple[int, int]): image size the position table is made
            for (unless ``pos_grid`` says otherwise); other input sizes get the table
            resized (``interpolate_mode``) each forward.
        pos_grid (tuple[int, int], optional): patch grid (h0, w0) of the position
            table, when it is not ``img_size / patch_size``. A pretrained table for
            another grid is resized once on load to the model's grid and, for inputs
            of yet another size, again at every forward (as timm and MMSegmentation
            do); giving the checkpoint's own grid here (e.g. ``(24, 24)`` for a
            384-pixel ViT/16) keeps its table as trained and resizes it straight to
            each input's grid, as Hugging Face's ``interpolate_pos_encoding`` does.
            ``'checkpoint'`` reads that grid from the ``init_cfg`` Pretrained file
            (square tables). A build option rather than a reshape on load: the
            optimizer and DDP are set up before weights are loaded and must see the
            final shape.
        patch_size (int): P.
        in_channels (int): image channels.
        with_cls_token (bool): prepend a learned class token (dropped from the
            output maps, but it takes part in attention).
        num_register_tokens (int): R learned register tokens (Darcet et al. 2024, "Vision
            Transformers Need Registers"; ``register_tokens`` [1, R, D]) placed after the
            class token. They have no position: an absolute table keeps rows for the class
            token only (the registers join after it is added, or get zero rows at a
            per-layer placement), a relative bias and RoPE treat them as the class token
            (extra tokens off the grid: the shared extra-token bias, not rotated). Like the
            class token they take part in attention and are dropped from the output maps.
        out_indices (int | Sequence[int]): layers whose output is returned
            (0-based, negative counts from the end).
        drop_rate (float): dropout after the position embedding, attention
            projection and MLP.
        attn_drop_rate (float): dropout on attention weights.
        drop_path_rate (float): stochastic depth, rising linearly from 0 at the
            first layer to this value at the last.
        qkv_bias (bool | tuple[bool, bool, bool]): bias on the qkv projection, or one
            flag per q, k, v: DINOv3 ``(True, False, True)``, no key bias (the absent bias
            is zero and never learned; the others are ``blocks.N.attn.q_bias`` /
            ``v_bias``).
        layer_norm_eps (float): epsilon of every LayerNorm (blocks and final norm):
            1e-6 as timm and MMSegmentation; Hugging Face ViT uses 1e-12. A loaded
            checkpoint never changes it: where the file's origin used another value,
            one WARNING line names both (``densevit.checkpoint.match.option_changes``).
        final_norm (bool): LayerNorm on the last layer's output (pre-norm layers
            leave it un-normalised); returned when the last layer is an output.
        interpolate_mode (str): how learned position tables are resized: an
            ``F.interpolate`` mode, or ``'bicubic_antialias'`` (bicubic with
            ``antialias=True``, as Hugging Face's DINOv2 with registers; ``learned_1d``
            tables only). Hugging Face's DINOv2 without registers: ``'bicubic'``.
        pos_embed (dict | str | None): position embedding type and placement
            (ViT paper App. D.4), e.g. ``dict(type='learned_2d',
            placement='every_layer_shared')``; see
            :mod:`densevit.models.layers.pos_embed_builder` for the types
            (none, learned_1d, learned_2d, sincos_2d, relative, rope) and placements
            (stem, every_layer, every_layer_shared); None is ``'none'``. The
            default, ``dict(type='learned_1d', placement='stem')``, is timm's
            layout (``pos_embed.weight``).
            A per-layer placement makes ``pos_embed`` a ModuleList
            (``pos_embed.{i}.*``, table i used before / inside layer i), except
            for a fixed RoPE (``dict(type='rope')`` without ``mixed``): one module,
            its rotation computed once per forward for every layer.
        stem (dict, optional): a CNN backbone config (e.g. ``dict(type='ResNet',
            depth=50, out_indices=(2,))``) for the hybrid ViT: its last output
            map is patch-embedded (set ``patch_size=1`` for the paper's hybrid).
            ``img_size`` stays the image size; strides multiply.
        with_cp (bool): gradient checkpointing of every block (recompute activations in
            the backward pass instead of storing them) to save memory in training.
        pad_to_patch (bool): zero-pad the input (after the CNN stem, if any) at the
            bottom / right to a multiple of the patch size, so that any size goes in;
            the maps then cover the padded size (MMSegmentation's ViT does this,
            ``patch_pad='corner'``: slide-inference windows at image borders need not
            be whole patches). False: such an input is an error.
        crop_to_patch (bool): drop the bottom / right rows and columns of the input that
            do not fill a whole patch (after the CNN stem, if any), as a strided patch
            convolution does and Hugging Face's DINOv2 accepts (a 520-pixel side gives 37
            patches of 14). False (and no ``pad_to_patch``): such an input is an error.
        layer_scale_init_value (float, optional): LayerScale (CaiT) on both residual
            branches of every layer (``blocks.N.ls1.gamma``, ``ls2.gamma`` [D]), starting
            at this value (DINOv2 trains from 1e-5; its checkpoints bring their own). None
            or 0: no layer scale.
        ffn_type (str): ``'mlp'`` (Linear, GELU, Linear) or ``'swiglu'`` (SwiGLU, as DINOv2
            ViT-g: hidden width two thirds of the arch's ``feedforward_channels`` rounded up
            to a multiple of 8, :func:`~densevit.models.layers.swiglu.swiglu_hidden_dims`;
            ViT-g: ``embed_dims=1536, num_layers=40, num_heads=24,
            feedforward_channels=6144`` -> 4096).
            ``'geglu'``: the same gated layer with GELU for SiLU (Shazeer 2020's GEGLU).
        glu_hidden (str): the hidden width of a gated ``ffn_type``: ``'two_thirds'`` (the
            rule above, DINOv2's) or ``'full'``, ``feedforward_channels`` itself (Hugging
            Face DINOv3's ``intermediate_size``: ViT-H+ ``embed_dims=1280,
            feedforward_channels=5120``).
        norm_every_output (bool): apply the final LayerNorm to every returned layer's
            output, not only the last layer's (DINOv2's ``get_intermediate_layers(norm=
            True)``, Hugging Face ``Dinov2Backbone`` with ``apply_layernorm``); needs
            ``final_norm``.
        pre_norm (bool): a LayerNorm on the token sequence after the position embedding,
            before the first layer (CLIP's ``pre_layrnorm``; ``pre_norm.*``, with the stem).
        act_cfg (dict, optional): the activation of ``ffn_type='mlp'``, e.g.
            ``dict(type='QuickGELU')`` (CLIP); None: GELU.
        window_size (int): ViTDet / SAM (Li et al. 2022; Kirillov et al. 2023): every layer
            not in ``global_attn_indexes`` attends inside non-overlapping windows of this
            many patches a side, the grid zero-padded at the bottom / right to whole windows
            and cropped back (:mod:`densevit.models.layers.vitdet_attention`); 0: every layer
            global. ViTDet-B and SAM-B: 14.
        global_attn_indexes (Sequence[int]): the layers that stay global (ViT-B: 2, 5, 8,
            11); negative counts from the end.
        decomposed_rel_pos (bool): decomposed relative positions (MViTv2) in every layer,
            ``blocks.N.attn.rel_pos_h`` / ``rel_pos_w`` [2s-1, D/heads] spanning the window
            in a windowed layer and the ``img_size`` grid in a global one (resized linearly
            for other grids), starting at zero. A layer option beside ``pos_embed``, not a
            ``pos_embed`` type: ViTDet and SAM add it to an absolute table.
        residual_block_indexes (Sequence[int]): layers followed by ViTDet's residual
            bottleneck block (1x1, 3x3, 1x1 convolutions with channel LayerNorms,
            ``blocks.N.residual.*``, starting as the identity).
            These four options need ``with_cls_token=False``, no register tokens and an
            absolute (or no) ``pos_embed``, and every forward the whole grid (no MAE subset).
        frozen_stages (int): -1 trains everything; 0 freezes the stem (CNN stem,
            patch embedding, cls and register tokens, stem / shared position table); k > 0 also
            freezes layers ``0..k-1`` with their own position tables (and the
            final norm when k = num_layers).
        init_cfg (dict, optional): e.g. ``dict(type='Pretrained', checkpoint=...)``.

    Shapes:
        x: [B, C, H, W] with H, W multiples of P (or any, with ``pad_to_patch``) ->
        tuple of [B, D, ceil(H/P), ceil(W/P)], one per ``out_indices`` entry, in that order.

    Masked pre-training (MAE, masked patch prediction) uses the steps of ``forward``
    separately: :meth:`embed` (image -> patch tokens), then :meth:`encode` (tokens ->
    the last layer's token sequence), optionally on a subset ``keep`` of the patches,
    each with its full-grid position code (:meth:`forward_visible` does both).
    """

    def __init__(self, arch='B', img_size=224, patch_size=16, in_channels=3,
                 with_cls_token=True, out_indices=-1, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0., qkv_bias=True, layer_norm_eps=1e-6, final_norm=True,
                 interpolate_mode='bicubic', pos_embed=DEFAULT,
                 stem=None, pos_grid=None, pad_to_patch=False, frozen_stages=-1, with_cp=False,
                 num_register_tokens=0, layer_scale_init_value=None, ffn_type='mlp',
                 norm_every_output=False, crop_to_patch=False, glu_hidden='two_thirds',
                 pre_norm=False, act_cfg=None, window_size=0, global_attn_indexes=(),
                 decomposed_rel_pos=False, residual_block_indexes=(), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        pos_embed = resolve_default(pos_embed, dict(type='learned_1d', placement='stem'))
        if pad_to_patch and crop_to_patch:
            raise ValueError('pad_to_patch and crop_to_patch exclude each other: an input '
                             'that does not tile into patches is either padded or cropped')
        if norm_every_output and not final_norm:
            raise ValueError('norm_every_output=True applies the final LayerNorm to every '
                             'output: it needs final_norm=True')
        if num_register_tokens < 0:
            raise ValueError(f'num_register_tokens must be >= 0, got {num_register_tokens}')
        self.with_cp = with_cp
        self.pad_to_patch = pad_to_patch
        self.crop_to_patch = crop_to_patch
        self.norm_every_output = norm_every_output
        self.interpolate_mode = interpolate_mode  # compared with a checkpoint origin's
        self.qkv_bias = qkv_bias_parts(qkv_bias)  # (q, k, v); compared with a checkpoint's
        setting = _arch_setting(arch)
        self.embed_dims = D = setting['embed_dims']
        self.num_layers = setting['num_layers']
        self.patch_size = patch_size
        eps = layer_norm_eps
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)

        stem_stride = 1
        self.stem = None
        if stem is not None:
            self.stem = MODELS.build(stem)
            in_channels, stem_stride = self.stem.out_channels[-1], self.stem.out_strides[-1]
        self.patch_embed = PatchEmbed(in_channels, D, patch_size)
        grid_hw = self.patch_embed.output_hw(
            (img_size[0] // stem_stride, img_size[1] // stem_stride))
        self.grid_hw = grid_hw  # the patch grid of an img_size input
        self.num_register_tokens = num_register_tokens
        # E: the tokens before the patch grid, the class token then the registers
        self.num_extra_tokens = (1 if with_cls_token else 0) + num_register_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if with_cls_token else None
        self.register_tokens = (nn.Parameter(torch.zeros(1, num_register_tokens, D))
                                if num_register_tokens else None)
        self.pos_embed_type, self.pos_embed_placement, _ = parse_position_embedding_cfg(pos_embed)
        if self.pos_embed_type == 'sine_2d':
            raise ValueError("pos_embed 'sine_2d' encodes a padding mask for DETR's transformer; "
                             "for ViT tokens use 'sincos_2d'")
        if interpolate_mode == 'bicubic_antialias' and self.pos_embed_type in (
                'learned_2d', 'relative'):
            raise ValueError(f"interpolate_mode='bicubic_antialias' resizes learned_1d tables "
                             f"only, not {self.pos_embed_type!r}")
        if pos_grid == 'checkpoint':
            pos_grid = _pretrained_grid(init_cfg)
        table_hw = grid_hw if pos_grid is None else tuple(pos_grid)
        self.pos_embed = self._build_pos_embed(pos_embed, table_hw, setting['num_heads'],
                                               interpolate_mode)
        modules = self._pos_embed_modules()
        # 'absolute' (added to tokens), 'relative' (attention bias), 'rotary' (RoPE) or None
        self.pos_embed_kind = modules[0].kind if modules else None
        self.pos_drop = nn.Dropout(drop_rate)
        self.pre_norm = nn.LayerNorm(D, eps=layer_norm_eps) if pre_norm else None

        # Plain Python, not torch.linspace: the model must also build on device='meta'.
        dpr = [drop_path_rate * i / max(self.num_layers - 1, 1) for i in range(self.num_layers)]
        # ViTDet / SAM: windowed layers, decomposed relative positions, residual conv blocks
        layers = grid_layer_options(self.num_layers, grid_hw, window_size, global_attn_indexes,
                                    decomposed_rel_pos, residual_block_indexes,
                                    self.num_extra_tokens, self.pos_embed_type)
        self.blocks = nn.ModuleList(
            block(D, setting['num_heads'], setting['feedforward_channels'],
                  drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                  drop_path_rate=dpr[i], qkv_bias=qkv_bias, norm_eps=eps,
                  layer_scale_init_value=layer_scale_init_value,
                  ffn_type=ffn_type, glu_hidden=glu_hidden, act_cfg=act_cfg, **grid_options)
            for i, (block, grid_options) in enumerate(layers))
        self.norm = nn.LayerNorm(D, eps=eps) if final_norm else None

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        if not isinstance(out_indices, Sequence) or not out_indices:
            raise TypeError(f'out_indices must be an int or a non-empty sequence, '
                            f'got {out_indices!r}')
        self.out_indices = []
        for i in out_indices:
            if not -self.num_layers <= i < self.num_layers:
                raise IndexError(f'out_indices entry {i} out of range for '
                                 f'{self.num_layers} layers')
            self.out_indices.append(i % self.num_layers)
        self.out_channels = [D] * len(self.out_indices)
        self.out_strides = [stem_stride * patch_size] * len(self.out_indices)

        if not -1 <= frozen_stages <= self.num_layers:
            raise ValueError(f'frozen_stages must be in [-1, {self.num_layers}]')
        self.frozen_stages = frozen_stages
        self._freeze_stages()

    def _build_pos_embed(self, cfg, grid_hw, num_heads, interpolate_mode):
        """None, one table (stem / every_layer_shared / a fixed RoPE, the same at every
        layer) or a ModuleList (every_layer).

        Its extra tokens: an absolute table has rows for the class token only (registers
        have no position); a relative bias or RoPE covers every extra token (class and
        registers: tokens off the grid)."""
        extra = self.num_extra_tokens
        if self.pos_embed_type not in ('relative', 'rope'):
            extra -= self.num_register_tokens

        def build():
            return build_position_embedding(cfg, self.embed_dims, grid_hw, num_heads,
                                            extra, interpolate_mode)
        if self.pos_embed_type == 'none':
            return None
        first = build()
        if self.pos_embed_placement != 'every_layer' or getattr(first, 'layer_independent',
                                                                False):
            return first
        return nn.ModuleList([first, *(build() for _ in range(self.num_layers - 1))])

    def _pos_embed_modules(self):
        if self.pos_embed is None:
            return []
        if isinstance(self.pos_embed, nn.ModuleList):
            return list(self.pos_embed)
        return [self.pos_embed]

    def _frozen_modules(self):
        if self.frozen_stages < 0:
            return []
        k = self.frozen_stages
        mods = [self.patch_embed, *self.blocks[:k]]
        mods += [m for m in (self.stem, self.pre_norm) if m is not None]
        if isinstance(self.pos_embed, nn.ModuleList):
            mods.extend(self.pos_embed[:k])  # a layer's own table goes with its layer
        elif self.pos_embed is not None:
            mods.append(self.pos_embed)
        if k == self.num_layers and self.norm is not None:
            mods.append(self.norm)
        return mods

    def _freeze_stages(self):
        tokens = [t for t in (self.cls_token, self.register_tokens) if t is not None]
        freeze(self._frozen_modules(), tokens if self.frozen_stages >= 0 else [])

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        return self

    @loads_pretrained(convert_vit, check=check_vit_size, expected_missing=rel_pos_keys)
    def init_weights(self):
        """ViT init: truncated normal (std .02) for Linear weights, the class
        token and position tables; zero biases; LayerNorm to identity; register tokens
        N(0, 1e-6) (DINOv2's code); LayerScale keeps its ``layer_scale_init_value``. The
        patch convolution keeps PyTorch's default (fan-in) init. An ``init_cfg``
        Pretrained checkpoint (timm / HF / official / MAE / densevit layout, converted by
        ``convert_vit``) is loaded afterwards, with missing keys reported; one of another
        width or depth is refused in one line naming both.
        """
        if not self._is_init:
            for m in self.modules():
                init_linear_or_norm(m)
            for pe in self._pos_embed_modules():
                pe.init_weights()
            if self.cls_token is not None:
                nn.init.trunc_normal_(self.cls_token, std=.02)
            if self.register_tokens is not None:
                nn.init.normal_(self.register_tokens, std=1e-6)
            for block in self.blocks:  # ViTDet's residual blocks (decomposed tables: zeros)
                if hasattr(block, 'init_weights'):
                    block.init_weights()
        super().init_weights()

    @property
    def layer_norm_eps(self):
        """The LayerNorm epsilon in use (compared with a checkpoint origin's)."""
        norm = next((m for m in self.modules() if isinstance(m, nn.LayerNorm)), None)
        return None if norm is None else norm.eps

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.cls_token is None and prefix + 'cls_token' in state_dict:
            self._drop_class_token(state_dict, prefix)
        if self.pos_embed_type == 'relative' and isinstance(self.pos_embed, nn.ModuleList):
            spread_shared_bias(self, state_dict, prefix)  # BEiT's pre-trained shared bias
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _drop_class_token(self, state_dict, prefix):
        """A checkpoint with a class token loaded into a ViT without one.

        timm files, and MMSegmentation's ViT even with ``with_cls_token=False``, have
        ``cls_token`` and its row first in ``pos_embed`` [1, 1 + h*w, D]; the row only
        ever reaches the class token, so the patch tokens are the same without both.
        """
        state_dict.pop(prefix + 'cls_token')
        key = prefix + 'pos_embed.weight'
        table = state_dict.get(key)
        if isinstance(self.pos_embed, LearnedPositionEmbedding) and table is not None \
                and table.dim() == 3 \
                and _has_class_row(table.shape[1], self.pos_embed.num_patches_hw):
            state_dict[key] = table[:, 1:]
            print_log(f'{prefix}cls_token and its position row dropped: this ViT has no class '
                      f'token (with_cls_token=False)', logger='current')

    def _layer_position(self, i, hw, shared, keep, like):
        """What layer i gets, for the kept tokens (all when ``keep`` is None): None (no
        position embedding, or at the stem) or :meth:`_position` of its module."""
        if self.pos_embed is None or self.pos_embed_placement == 'stem':
            return None
        if shared is None:  # every_layer: layer i's own module
            shared = self._position(self.pos_embed[i], hw, keep, like)
        return shared

    def _position(self, pe, hw, keep, like):
        """One position module's table [1 or B, N, D] (absolute), bias [1 or B, h, N, N]
        (relative) or :class:`Rotation` (rotary), at the kept tokens; ``like``: the tokens
        (device and dtype of a rotation)."""
        E = pe.num_extra_tokens
        if pe.kind == 'absolute':  # zero rows for the registers (they have no position)
            table = select_table(pe.table(hw), keep, E)
            if self.register_tokens is None:
                return table
            return self._after_class_token(table, table.new_zeros(
                table.shape[0], self.num_register_tokens, table.shape[2]))
        if pe.kind == 'rotary':
            return select_rotation(pe.rotation(hw, like), keep, E)
        return select_bias(pe.bias(hw), keep, E)

    def _after_class_token(self, x, inserted):
        """x [B', C + n, D] -> [B', C + R + n, D]: ``inserted`` [B', R, D] (the register
        tokens, or their rows of a position table) placed after the C class tokens."""
        C = self.num_extra_tokens - self.num_register_tokens
        return torch.cat([x[:, :C], inserted, x[:, C:]], dim=1)

    def embed(self, x):
        """x: [B, C, H, W] -> patch tokens [B, h*w, D] (before the class token and any
        position embedding) and the patch grid (h, w)."""
        if self.stem is not None:
            x = self.stem(x)[-1]  # hybrid: patches of the CNN's feature map
        P = self.patch_size
        if self.pad_to_patch:
            x = F.pad(x, (0, -x.shape[-1] % P, 0, -x.shape[-2] % P))
        elif self.crop_to_patch:
            x = x[..., :x.shape[-2] - x.shape[-2] % P, :x.shape[-1] - x.shape[-1] % P]
        return self.patch_embed(x)

    def _layers(self, x, hw, keep, last):
        """Patch tokens [B, h*w, D] -> yield (i, tokens [B, E + n, D]) after layers 0..last.

        ``keep`` [B, n] (long, grid indices) keeps only those patches, each with the
        position code of its place in the full grid; None keeps all (n = h*w).
        """
        x = self.stem_sequence(x, hw, keep)
        shared = self.shared_position(hw, keep, x)
        for i in range(last + 1):
            x = self.run_block(i, x, hw, self._layer_position(i, hw, shared, keep, x))
            yield i, x

    def shared_position(self, hw, keep, like):
        """The one table, bias or rotation that every layer uses, built once per forward
        (:meth:`_position`); None at the stem, without position embedding, or with one
        module per layer."""
        if self.pos_embed_placement != 'stem' and self.pos_embed is not None \
                and not isinstance(self.pos_embed, nn.ModuleList):
            return self._position(self.pos_embed, hw, keep, like)
        return None

    def run_block(self, i, x, hw, position=None, attn_mask=None):
        """Layer i on x [B, N, D] -> [B, N, D] (the final norm after the last layer).

        ``position``: the layer's code for the N tokens (:meth:`_layer_position`): a table
        added before the layer, a relative bias added to its attention logits, or a RoPE
        rotation of its queries and keys. ``attn_mask``: a bool mask broadcastable to
        [B, heads, N, N] (True: may attend), e.g. EoMT's masked attention; it cannot be
        combined with a relative bias.
        """
        kind = None if position is None else self.pos_embed_kind
        if kind == 'absolute':
            x = x + position
        if kind == 'relative':
            if attn_mask is not None:
                raise ValueError('run_block: an attention mask beside a relative position '
                                 'bias is not supported')
            attn_mask = position.to(x.dtype)
        rope = position if kind == 'rotary' else None
        block = self.blocks[i]
        if self.with_cp and self.training and x.requires_grad:
            x = checkpoint(block, x, attn_mask, rope, hw, use_reentrant=False)
        else:
            x = block(x, attn_mask=attn_mask, rope=rope, hw=hw)
        if i == self.num_layers - 1 and self.norm is not None:
            x = self.norm(x)
        return x

    def stem_sequence(self, x, hw, keep=None):
        """Patch tokens [B, h*w, D] (the kept ones, ``keep`` [B, n]) -> the first layer's
        input [B, E + n, D]: class token, the stem's position code, registers, dropout and
        the pre-encoder norm."""
        B = x.shape[0]
        if keep is not None and uses_grid_layers(self):
            raise ValueError('windowed attention, decomposed relative positions and residual '
                             'blocks need the whole patch grid: a subset of patches (keep, '
                             "MAE's visible ones) cannot go through this ViT")
        if keep is not None:
            x = gather_tokens(x, keep)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        if self.pos_embed_placement == 'stem':
            x = x + select_table(self.pos_embed.table(hw), keep, self.pos_embed.num_extra_tokens)
        if self.register_tokens is not None:  # after the position code: they have none
            x = self._after_class_token(x, self.register_tokens.expand(B, -1, -1))
        x = self.pos_drop(x)  # [B, E + n, D]
        if self.pre_norm is not None:
            x = self.pre_norm(x)
        return x

    def encode(self, tokens, hw, keep=None):
        """Patch tokens (from :meth:`embed`, possibly altered) -> the last layer's token
        sequence [B, E + n, D] (final norm applied): the E extra tokens (class token, then
        registers), then the kept patches in ``keep`` order.

        Args:
            tokens: [B, h*w, D] patch tokens of grid ``hw``.
            hw (tuple[int, int]): the patch grid (h, w).
            keep (Tensor, optional): [B, n] long, the grid indices (row-major) of the
                patches to keep per image (MAE's visible patches); every position
                embedding type and placement gathers the kept patches' rows (absolute)
                or rows and columns (relative bias). None: all patches.
        """
        *_, (_, x) = self._layers(tokens, hw, keep, self.num_layers - 1)
        return x

    def forward_visible(self, x, keep=None):
        """x: [B, C, H, W], keep: [B, n] -> [B, E + n, D]; :meth:`encode` of the image."""
        tokens, hw = self.embed(x)
        return self.encode(tokens, hw, keep)

    def forward(self, x):
        """x: [B, C, H, W] -> tuple of [B, D, H/P, W/P] (see class docstring)."""
        B = x.shape[0]
        tokens, (h, w) = self.embed(x)  # [B, h*w, D]
        feats = {}
        last_needed = max(self.out_indices)  # layers after it would be wasted work
        for i, out in self._layers(tokens, (h, w), None, last_needed):
            if i in self.out_indices:
                if self.norm_every_output and i != self.num_layers - 1:
                    out = self.norm(out)  # (the last layer's output has it already)
                grid = out[:, self.num_extra_tokens:]  # drop the class and register tokens
                feats[i] = grid.transpose(1, 2).reshape(B, self.embed_dims, h, w).contiguous()
        return tuple(feats[i] for i in self.out_indices)
