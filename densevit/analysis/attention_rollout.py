"""Attention rollout (Abnar & Zuidema 2020) and DETR decoder attention maps.

Rollout follows information through the layers: each layer's attention,
averaged over heads, gets the identity added (the residual connection carries
a token to itself) and rows renormalised; the product over layers, last
layer on the left, says how much each output token draws from each input token.
"""
import torch


def attention_rollout(attns):
    """attns: list over layers (first first) of [B, heads, N, N] -> [B, N, N]."""
    rollout = None
    for a in attns:
        a = a.double().mean(1)
        a = a + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout


def rollout_map(rollout, hw, num_extra_tokens=0):
    """[B, N, N] rollout -> [B, h, w] map over the patch grid.

    With a class token (E > 0) the class token's row (token 0) over the patches;
    without one, the mean over patch queries of their rows (what the patches
    together draw from each patch).
    """
    E = num_extra_tokens
    grid = rollout[:, 0, E:] if E else rollout[:, E:, E:].mean(1)
    return grid.reshape(-1, *hw)


def decoder_query_maps(cross_attn, hw, queries):
    """Head-averaged cross-attention of chosen object queries, as maps over the memory grid.

    Args:
        cross_attn: [heads, Q, N] weights of one image (one decoder layer).
        hw (tuple[int, int]): memory (feature map) grid, N = h * w.
        queries (Sequence[int]): query indices (the detections to show).

    Returns:
        [len(queries), h, w].
    """
    a = cross_attn.float().mean(0)[list(queries)]
    return a.reshape(len(queries), *hw)
