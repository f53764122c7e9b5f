"""Checks shared by the tests that load Hugging Face ViT-style checkpoints (DINOv2, DINOv3)
into densevit's ViT and compare its outputs with HF's."""
import logging

import torch

from densevit.checkpoint.cli import run
from densevit.checkpoint.convert import convert_any

TOLERANCE = 1e-4


def max_diff(a, b):
    return (a - b).abs().max().item()


def as_map(tokens, size, patch):
    """[B, h*w, D] -> [B, D, h, w] for an image of ``size`` (HF's grid: H // P, W // P)."""
    return tokens.transpose(1, 2).reshape(*tokens.shape[::2], size[0] // patch,
                                          size[1] // patch)


def warning_lines(log_lines):
    return [m for lvl, m in log_lines if lvl >= logging.WARNING]


def assert_tokens_match(ours, hf, sizes, patch):
    """At each input size: densevit's last token sequence equals HF's ``last_hidden_state``
    (class token, registers, patches) and its output map HF's patches."""
    for size in sizes:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref = hf(pixel_values=x).last_hidden_state  # [B, E + h*w, D]
            tokens = ours.forward_visible(x)
            (out,) = ours(x)
        assert tokens.shape == ref.shape
        assert max_diff(tokens, ref) < TOLERANCE, size
        ref_map = as_map(ref[:, ours.num_extra_tokens:], size, patch)
        assert max_diff(out, ref_map) < TOLERANCE, size


def assert_feature_maps_match(ours, hf_backbone, sizes):
    """At each input size: densevit's maps equal an HF backbone's ``feature_maps``."""
    for size in sizes:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ref, out = hf_backbone(pixel_values=x).feature_maps, ours(x)
        assert len(out) == len(ref)
        for a, b in zip(out, ref, strict=True):
            assert a.shape == b.shape and max_diff(a, b) < TOLERANCE, size


def pretrained(make_vit, checkpoint):
    """``make_vit(init_cfg=Pretrained checkpoint)``, its weights loaded, in eval mode."""
    vit = make_vit(init_cfg=dict(type='Pretrained', checkpoint=str(checkpoint)))
    vit.init_weights()
    return vit.eval()


def assert_loads_like_hf(make_vit, checkpoint, hf, size, log_lines):
    """Through ``init_cfg``, ``checkpoint`` gives HF's ``last_hidden_state`` at ``size``,
    with no warning."""
    vit = pretrained(make_vit, checkpoint)
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        assert max_diff(vit.forward_visible(x), hf(pixel_values=x).last_hidden_state) \
            < TOLERANCE
    assert not warning_lines(log_lines)


def converted_with_the_command(src, out_path):
    """``tools/convert/checkpoint.py SRC OUT`` (cli.run on convert_any): the file's meta."""
    assert run(convert_any, 'checkpoint', [str(src), str(out_path)]) == 0
    return torch.load(out_path, weights_only=True)['meta']
