"""Swin Transformer building blocks: (shifted-)window block, patch merging, one stage.

Tokens travel as [B, H*W, C] with their grid (H, W) alongside, as in the
official code; a block pads its map to whole windows and crops it back, so any
grid size works.

Shifting a map that is no larger than one window: the dense-prediction codes
(MMSegmentation, MMDetection, HF ``SwinBackbone``) shift every second block whatever
the map size (``always_shift=True``); the classification models (official and timm
at their training size, HF ``SwinModel`` at any size) do not shift in a stage whose
map's shorter side is no longer than the window M, e.g. the 7x7 last stage of a 224
model with M = 7 (``always_shift=False``). Both are offered; checkpoints pick the
one of their origin (``SwinTransformer(always_shift=...)``). A map smaller than
M keeps the M x M window here (zero-padded); the classifiers would shrink the window
(HF ``SwinModel`` then fails on its bias table), so there is no reference for it.
"""
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmcv.cnn.bricks import DropPath
from torch import nn

from .vit_block import Mlp
from .window_attention import (
    WindowMultiheadAttention,
    round_up,
    shifted_window_mask,
    window_token_order,
)


class SwinBlock(nn.Module):
    """``x + W-MSA(LN(x))`` then ``x + MLP(LN(x))``; W-MSA on windows shifted by M/2 if ``shift``.

    Args:
        embed_dims (int): C.
        num_heads (int): attention heads.
        window_size (int): M.
        shift (bool): shifted windows (every second block of a stage).
        always_shift (bool): shift also when the map's shorter side is <= M
            (False: such a map is attended without a shift, as Swin's classifiers do).
        mlp_ratio (float): MLP hidden width / C.
        qkv_bias (bool), drop_rate, attn_drop_rate, drop_path_rate (float): as in ViT.

    Shapes:
        x: [B, H*W, C], hw = (H, W), mask: [nW, M*M, M*M] for the padded map
        (only used when ``shift``) -> [B, H*W, C].
    """

    def __init__(self, embed_dims, num_heads, window_size=7, shift=False, always_shift=True,
                 mlp_ratio=4., qkv_bias=True, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0.):
        super().__init__()
        self.window_size = window_size
        self.shift_size = window_size // 2 if shift else 0
        self.always_shift = always_shift
        self.norm1 = nn.LayerNorm(embed_dims)
        self.attn = WindowMultiheadAttention(embed_dims, num_heads, window_size, qkv_bias,
                                             attn_drop=attn_drop_rate, proj_drop=drop_rate)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.mlp = Mlp(embed_dims, int(embed_dims * mlp_ratio), drop=drop_rate)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def shift_for(self, hw):
        """The shift this block applies to an (H, W) map: M // 2 or 0; None when that
        depends on a size that is symbolic (``always_shift=False`` under ``torch.export``):
        the graph then decides, per input (see :meth:`shift_in_graph`)."""
        if self.always_shift or not self.shift_size:
            return self.shift_size
        if any(isinstance(v, torch.SymInt) for v in hw):
            return None
        return self.shift_size if min(hw) > self.window_size else 0

    def shift_in_graph(self, hw, mask, device):
        """(order, inverse, mask) of :func:`window_token_order` and the shifted-window mask,
        chosen in the graph: shifted where the map's shorter side exceeds M, else unshifted
        with a zero mask. For an exported graph (symbolic ``hw``), which must shift or not
        as PyTorch does at each input size, not as at the size it was traced with."""
        M = self.window_size
        shifted = torch.scalar_tensor(torch.sym_min(*hw) > M, dtype=torch.bool, device=device)
        order, inverse = window_token_order(tuple(hw), M, self.shift_size, device)
        order_0, inverse_0 = window_token_order(tuple(hw), M, 0, device)
        return (torch.where(shifted, order, order_0), torch.where(shifted, inverse, inverse_0),
                torch.where(shifted, mask, torch.zeros_like(mask)))

    def window_attention(self, x, hw, mask):
        """x: [B, H*W, C] normalised tokens -> attention output, same shape."""
        B, _, C = x.shape
        (H, W), M = hw, self.window_size
        shift = self.shift_for(hw)
        nh, nw = (H + M - 1) // M, (W + M - 1) // M  # windows per column / row
        Hp, Wp = nh * M, nw * M
        # (while exporting, H and W are symbolic: the padding, maybe by 0, is always in the graph)
        if torch.compiler.is_exporting() or Hp > H or Wp > W:
            # Pad with zeros before shifting (as the official detection code does):
            # padded tokens then take part in attention exactly as in the reference.
            x = F.pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H)).view(B, Hp * Wp, C)
        # roll + window partition as one gather, and back (with the crop) as another
        if shift is None:  # (exporting) shifted or not by the input's size
            order, inverse, mask = self.shift_in_graph(hw, mask, x.device)
        else:
            order, inverse = window_token_order(tuple(hw), M, shift, x.device)
            mask = mask if shift else None
        nW = nh * nw
        x = self.attn(x.index_select(1, order).view(B, nW, M * M, C), mask)
        return x.view(B, nW * M * M, C).index_select(1, inverse)

    def forward(self, x, hw, mask=None):
        x = x + self.drop_path(self.window_attention(self.norm1(x), hw, mask))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """Halve the grid: concatenate each 2x2 neighbourhood (4C), LayerNorm, Linear to 2C.

    Channel order of the concatenation is the official one, which pretrained
    ``reduction`` weights depend on: (row 0, col 0), (1, 0), (0, 1), (1, 1).
    An odd grid is padded with zeros at the bottom / right first.

    Shapes: x [B, H*W, C], hw = (H, W) -> ([B, ceil(H/2)*ceil(W/2), 2C], (ceil(H/2), ceil(W/2))).
    """

    def __init__(self, in_channels, out_channels=None):
        super().__init__()
        out_channels = out_channels or 2 * in_channels
        self.norm = nn.LayerNorm(4 * in_channels)
        self.reduction = nn.Linear(4 * in_channels, out_channels, bias=False)

    def forward(self, x, hw):
        B, _, C = x.shape
        H, W = hw
        h, w = (H + 1) // 2, (W + 1) // 2
        x = F.pad(x.view(B, H, W, C), (0, 0, 0, 2 * w - W, 0, 2 * h - H))
        # [B, h, (row r), w, (col c), C] -> channels ordered (c, r): x[r::2, c::2] for
        # (r, c) = (0, 0), (1, 0), (0, 1), (1, 1), the official concatenation
        x = x.view(B, h, 2, w, 2, C).permute(0, 1, 3, 4, 2, 5).reshape(B, h * w, 4 * C)
        return self.reduction(self.norm(x)), (h, w)


class SwinStage(nn.Module):
    """``depth`` Swin blocks alternating regular / shifted windows, then optional patch merging.

    Args:
        embed_dims (int): C of this stage.
        depth (int): number of blocks.
        num_heads (int): attention heads.
        window_size (int): M.
        drop_path_rates (list[float]): one per block.
        downsample (bool): end with :class:`PatchMerging` (C -> 2C, grid / 2).
        with_cp (bool): recompute each block in the backward pass to save memory.
        **block_kwargs: ``always_shift, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate``.

    Shapes:
        x [B, H*W, C], hw -> (out [B, H*W, C], hw, merged [B, h*w, 2C] or None, (h, w)).
    """

    def __init__(self, embed_dims, depth, num_heads, window_size=7, drop_path_rates=None,
                 downsample=True, with_cp=False, **block_kwargs):
        super().__init__()
        drop_path_rates = drop_path_rates or [0.] * depth
        self.window_size = window_size
        self.with_cp = with_cp
        self.blocks = nn.ModuleList(
            SwinBlock(embed_dims, num_heads, window_size, shift=i % 2 == 1,
                      drop_path_rate=drop_path_rates[i], **block_kwargs)
            for i in range(depth))
        self.downsample = PatchMerging(embed_dims) if downsample else None
        self._mask_cache = None  # (padded hw, device, mask): input sizes rarely change

    def _shift_mask(self, hw, device):
        """The shifted blocks' mask for grid ``hw``; one per stage, rebuilt only when
        the padded grid or the device changes (not on every forward)."""
        M = self.window_size
        padded = (round_up(hw[0], M), round_up(hw[1], M))
        if torch.compiler.is_exporting():  # symbolic sizes: the mask is part of the graph
            return shifted_window_mask(padded, M, M // 2, device)
        cache = self._mask_cache
        if cache is None or cache[0] != padded or cache[1] != device:
            cache = self._mask_cache = (padded, device,
                                        shifted_window_mask(padded, M, M // 2, device))
        return cache[2]

    def forward(self, x, hw):
        # Every shifted block of the stage sees the same padded grid, so the same mask.
        shifted = any(block.shift_for(hw) != 0 for block in self.blocks)  # (None: maybe)
        mask = self._shift_mask(hw, x.device) if shifted else None
        for block in self.blocks:
            if self.with_cp and self.training and x.requires_grad:
                x = cp.checkpoint(block, x, hw, mask, use_reentrant=False)
            else:
                x = block(x, hw, mask)
        if self.downsample is None:
            return x, hw, None, None
        merged, merged_hw = self.downsample(x, hw)
        return x, hw, merged, merged_hw
