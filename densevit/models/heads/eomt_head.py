"""EoMT's mask module (Kerssies et al. 2025, Sec. 3.2): class and mask predictions from the
query tokens and patch tokens of a ViT, with the mask-classification set loss."""
import torch
from mmengine.model import BaseModule
from torch import nn

from densevit.models.layers.mask_upscale import UpscaleBlock
from densevit.models.losses.mask_criterion import head_criterion
from densevit.registry import MODELS
from densevit.utils.defaults import DEFAULT


class MaskMLP(nn.Module):
    """Three Linear(D, D) layers with GELU between them: a query token -> its mask embedding.

    Shapes: [..., D] -> [..., D].
    """

    def __init__(self, channels):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels)
        self.fc2 = nn.Linear(channels, channels)
        self.fc3 = nn.Linear(channels, channels)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


@MODELS.register_module()
class EoMTHead(BaseModule):
    """Class logits and mask logits from a ViT's (normalised) token sequence.

    The query tokens give the class logits (``class_embed``, a Linear to K+1, index K "no
    object") and, through :class:`MaskMLP` (``mask_embed``), mask embeddings; the patch tokens,
    reshaped to their grid and upscaled by ``num_upscale_blocks`` :class:`UpscaleBlock` s
    (``upscale``), give per-pixel features; a mask logit is the dot product of a query's
    embedding with a pixel's feature. The same module predicts before each of the last
    blocks (EoMT's intermediate predictions, which drive its masked attention) and after the
    last.

    Args:
        in_channels (int): D, the ViT's width (EoMT fills it in from its backbone).
        num_classes (int): K.
        num_upscale_blocks (int): 2x upscalings of the patch grid (EoMT fills in
            :func:`~densevit.models.layers.mask_upscale.official_num_upscale_blocks` of the
            patch size: ViT/16 2, masks at 1/4 of the image).
        criterion (dict): the loss, default
            ``dict(type='MaskSetCriterion', num_classes=K)`` (EoMT's weights 2 / 5 / 5,
            no-object weight 0.1, 12544 points); ``num_classes`` is filled in.
        init_cfg (dict, optional): mmengine init config.

    Shapes:
        forward(tokens [B, Q + E + h*w, D], hw=(h, w), num_queries=Q, num_extra_tokens=E) ->
        mask logits [B, Q, h * 2^u, w * 2^u], class logits [B, Q, K+1].
    """

    def __init__(self, in_channels, num_classes, num_upscale_blocks=2, criterion=DEFAULT,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        criterion = head_criterion(criterion, num_classes, 'EoMTHead')
        if num_upscale_blocks < 0:
            raise ValueError(f'EoMTHead: num_upscale_blocks must be >= 0, got '
                             f'{num_upscale_blocks}')
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.class_embed = nn.Linear(in_channels, num_classes + 1)
        self.mask_embed = MaskMLP(in_channels)
        self.upscale = nn.Sequential(*(UpscaleBlock(in_channels)
                                       for _ in range(num_upscale_blocks)))
        self.criterion = MODELS.build(criterion)

    @property
    def mask_stride(self):
        """How many times the mask map is finer than the patch grid (2^u)."""
        return 2 ** len(self.upscale)

    def forward(self, tokens, hw, num_queries, num_extra_tokens):
        """tokens [B, Q + E + h*w, D] (queries, the E class / register tokens, the patch grid
        row by row), hw = (h, w) -> (mask logits [B, Q, h 2^u, w 2^u], class logits
        [B, Q, K+1])."""
        queries = tokens[:, :num_queries]
        grid = tokens[:, num_queries + num_extra_tokens:]  # [B, h*w, D]
        grid = grid.transpose(1, 2).reshape(grid.shape[0], -1, *hw)  # [B, D, h, w]
        pixels = self.upscale(grid)
        mask_logits = torch.einsum('bqc,bchw->bqhw', self.mask_embed(queries), pixels)
        return mask_logits, self.class_embed(queries)
