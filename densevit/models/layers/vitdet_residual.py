"""ViTDet's residual convolution blocks (Li et al. 2022, Sec. 3 "Backbone adaptation",
Table 2(b): one more way to let windowed blocks exchange information).

After chosen encoder layers, the patch grid goes through a bottleneck of three
convolutions (1x1 to half the width, 3x3, 1x1 back), each followed by a channel
LayerNorm, GELU after the first two, and is added to itself. The last norm starts at zero,
so the block starts as the identity.
"""
from torch import nn

from .layer_norm_2d import LayerNorm2d
from .vit_block import TransformerEncoderLayer


class ResBottleneck(nn.Module):
    """x + LN(conv1x1(GELU(LN(conv3x3(GELU(LN(conv1x1(x)))))))) on an NCHW map; the
    convolutions without bias. Parameter names are ViTDet's (``conv1..3``, ``norm1..3``).

    Args:
        channels (int): C, in and out.
        bottleneck_channels (int): the width inside (ViTDet: C / 2).
        eps (float): the norms' epsilon (1e-6, whatever the encoder's, as ViTDet).

    Shapes: [B, C, H, W] -> [B, C, H, W].
    """

    def __init__(self, channels, bottleneck_channels, eps=1e-6):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, bottleneck_channels, 1, bias=False)
        self.norm1 = LayerNorm2d(bottleneck_channels, eps=eps)
        self.act1 = nn.GELU()
        self.conv2 = nn.Conv2d(bottleneck_channels, bottleneck_channels, 3, padding=1,
                               bias=False)
        self.norm2 = LayerNorm2d(bottleneck_channels, eps=eps)
        self.act2 = nn.GELU()
        self.conv3 = nn.Conv2d(bottleneck_channels, channels, 1, bias=False)
        self.norm3 = LayerNorm2d(channels, eps=eps)

    def init_weights(self):
        """Kaiming-normal convolutions (fan out), identity norms, the last norm zero."""
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.kaiming_normal_(conv.weight, mode='fan_out', nonlinearity='relu')
        for norm in (self.norm1, self.norm2):
            nn.init.ones_(norm.weight)
            nn.init.zeros_(norm.bias)
        nn.init.zeros_(self.norm3.weight)
        nn.init.zeros_(self.norm3.bias)

    def forward(self, x):
        out = self.act1(self.norm1(self.conv1(x)))
        out = self.act2(self.norm2(self.conv2(out)))
        return x + self.norm3(self.conv3(out))


class ResidualBottleneckLayer(TransformerEncoderLayer):
    """A :class:`~.vit_block.TransformerEncoderLayer` followed by a :class:`ResBottleneck`
    on its patch grid (``residual``); same arguments, the grid tokens only (no class token).

    Shapes: x [B, h*w, D] of grid ``hw`` -> [B, h*w, D].
    """

    def __init__(self, embed_dims, *args, **kwargs):
        super().__init__(embed_dims, *args, **kwargs)
        self.residual = ResBottleneck(embed_dims, embed_dims // 2)

    def init_weights(self):
        self.residual.init_weights()

    def forward(self, x, attn_mask=None, rope=None, hw=None):
        x = super().forward(x, attn_mask=attn_mask, rope=rope, hw=hw)
        B, N, D = x.shape
        grid = self.residual(x.transpose(1, 2).reshape(B, D, *hw))
        return grid.flatten(2).transpose(1, 2)
