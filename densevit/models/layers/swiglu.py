"""SwiGLU feed-forward layer (Shazeer 2020, "GLU Variants Improve Transformer"), as DINOv2's
ViT-g uses it."""
import torch.nn.functional as F
from torch import nn


def swiglu_hidden_dims(feedforward_channels):
    """Hidden width of the SwiGLU layer standing in for an MLP of width F: two thirds of F
    (three matrices instead of two, about the same parameters), rounded up to a multiple
    of 8, DINOv2's rule (and Hugging Face ``Dinov2SwiGLUFFN``'s): F = 4 * 1536 -> 4096."""
    return (int(feedforward_channels * 2 / 3) + 7) // 8 * 8


class SwiGLU(nn.Module):
    """``fc2(SiLU(x W_gate) * (x W_up))``, the gate and up projections packed in ``fc1``.

    Args:
        embed_dims (int): D.
        feedforward_channels (int): F of the MLP it replaces; the hidden width H is
            :func:`swiglu_hidden_dims` (F).
        drop (float): dropout after the gating and after ``fc2``.

    Parameters:
        fc1: Linear(D, 2H), rows [gate; up] (DINOv2's ``w12``, HF's file ``weights_in``).
        fc2: Linear(H, D) (DINOv2's ``w3``, HF's ``weights_out``).

    Shapes: [..., D] -> [..., D].
    """

    def __init__(self, embed_dims, feedforward_channels, drop=0.):
        super().__init__()
        hidden = swiglu_hidden_dims(feedforward_channels)
        self.fc1 = nn.Linear(embed_dims, 2 * hidden)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, embed_dims)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)  # [..., H] each
        return self.drop2(self.fc2(self.drop1(F.silu(gate) * up)))
