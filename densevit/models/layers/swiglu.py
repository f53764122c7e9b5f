"""Gated feed-forward layers (Shazeer 2020, "GLU Variants Improve Transformer"): SwiGLU, as
DINOv2's ViT-g and DINOv3's ViT-S+ / H+ / 7B use it, and GEGLU."""
import torch.nn.functional as F
from torch import nn

#: how the hidden width H follows from the feed-forward width F of the MLP it replaces
GLU_HIDDEN = ('two_thirds', 'full')


def swiglu_hidden_dims(feedforward_channels):
    """Hidden width of the SwiGLU layer standing in for an MLP of width F: two thirds of F
    (three matrices instead of two, about the same parameters), rounded up to a multiple
    of 8, DINOv2's rule (and Hugging Face ``Dinov2SwiGLUFFN``'s): F = 4 * 1536 -> 4096."""
    return (int(feedforward_channels * 2 / 3) + 7) // 8 * 8


class SwiGLU(nn.Module):
    """``fc2(SiLU(x W_gate) * (x W_up))``, the gate and up projections packed in ``fc1``.

    Args:
        embed_dims (int): D.
        feedforward_channels (int): F.
        drop (float): dropout after the gating and after ``fc2``.
        hidden (str): the hidden width H: ``'two_thirds'``, :func:`swiglu_hidden_dims`
            (F) (Shazeer's parameter-matched width; DINOv2, and DINOv3's own code, which
            rounds the same way); ``'full'``, F itself (Hugging Face DINOv3's
            ``intermediate_size``, which stores that width already reduced).

    Parameters:
        fc1: Linear(D, 2H), rows [gate; up] (DINOv2's ``w12``, HF's file ``weights_in``;
            HF DINOv3's ``gate_proj``, ``up_proj``).
        fc2: Linear(H, D) (DINOv2's ``w3``, HF's ``weights_out``, HF DINOv3's ``down_proj``).

    Shapes: [..., D] -> [..., D].
    """

    act = staticmethod(F.silu)

    def __init__(self, embed_dims, feedforward_channels, drop=0., hidden='two_thirds'):
        super().__init__()
        if hidden not in GLU_HIDDEN:
            raise ValueError(f'Unknown gated feed-forward hidden width rule {hidden!r}; '
                             f'choose from {GLU_HIDDEN}')
        hidden = (swiglu_hidden_dims(feedforward_channels) if hidden == 'two_thirds'
                  else feedforward_channels)
        self.fc1 = nn.Linear(embed_dims, 2 * hidden)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, embed_dims)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)  # [..., H] each
        return self.drop2(self.fc2(self.drop1(self.act(gate) * up)))


class GEGLU(SwiGLU):
    """``fc2(GELU(x W_gate) * (x W_up))`` (exact GELU): :class:`SwiGLU` with GELU as the
    gate's activation (Hugging Face DINOv3's gated MLP with ``hidden_act='gelu'``)."""

    act = staticmethod(F.gelu)
