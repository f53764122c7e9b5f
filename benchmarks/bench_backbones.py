"""Backbone speed against HF transformers, on the same weights, in one run.

    OMP_NUM_THREADS=1 python benchmarks/bench_backbones.py [--models NAME ...] [--repeats 5]
        [--tiny] [--json FILE]

Each pair is an HF transformers model built from its config, every saved tensor drawn at
random (``randomize_(fan_in=True)``: HF's own init leaves biases zero, norms identities and
relative-position tables zero, where a mis-converted tensor would not show), its state
dict converted by densevit's own converter (``convert_vit`` / ``convert_swin``) and loaded
strictly into the densevit backbone built as the converter's module docs say. Batch 1,
float32, eval mode, forward under ``no_grad``; each config's ``image_size`` is the input
size (no position table resized at run time, except where noted).

============  ================================================  =====  ==========================
``--models``  HF model (config)                                 input  densevit backbone
============  ================================================  =====  ==========================
vit           ``ViTModel`` ViT-B/16                             224²,  ``VisionTransformer``
                                                                512²   (arch B)
swin          ``SwinModel`` Swin-T, window 7                    224²   ``SwinTransformer`` tiny,
                                                                       ``always_shift=False``,
                                                                       ``out_indices=(3,)``
dinov2        ``Dinov2Model`` ViT-B/14                          224²   ViT, LayerScale
dinov2_reg    ``Dinov2WithRegistersModel`` ViT-B/14, 4          224²   ViT, LayerScale,
              registers                                                4 registers
dinov3        ``DINOv3ViTModel`` ViT-B/16: RoPE, 4 registers,   224²   ViT, RoPE (dinov3),
              no key bias                                              ``qkv_bias=(T, F, T)``
beit          ``BeitModel`` BEiT-B/16, relative position bias   224²   ViT, ``relative`` bias
              per layer, no key bias                                   every layer
clip          ``CLIPVisionModel`` ViT-B/16, QuickGELU,          224²   ViT, ``pre_norm``,
              pre-norm                                                 QuickGELU, no final norm
vitdet        ``VitDetModel`` ViT-B/16: windows of 14, layers   512²   ViT, ``window_size=14``,
              2, 5, 8, 11 global, decomposed relative                  ``global_attn_indexes``,
              positions, table of the 224² pre-training                ``decomposed_rel_pos``,
                                                                       ``pos_grid=(14, 14)``
sam           ``SamVisionModel`` (SAM's image encoder) ViT-B:   512²   as vitdet, its table
              the same windows and tables; config                      32 x 32
              ``image_size`` 512 (released: 1024)
relpos        densevit ViT-B/16 with a relative position bias   224²   (no HF model)
              in every layer against the plain one
============  ================================================  =====  ==========================

What is compared (before timing): densevit's output map (the last layer's patch tokens
after its final norm where the model has one, [1, D, h, w]) against HF's
``last_hidden_state`` patches (class and register tokens dropped, reshaped to the map;
ViTDet's is a map already; SAM's with its neck replaced by an identity, so its last
layer's output: densevit's ViT has no neck and SAM's would cost HF time densevit does not
spend). ``max_rel_err`` = max |densevit - HF| / max |HF|. A pair above 1e-4 is reported
and not timed, and the script exits with status 1.

Times are medians of ``--repeats`` forwards per model after one warm-up each, the two
models' forwards interleaved (order flipped every repeat) so that load from other
processes falls on both sides; the ratio is the median of the per-repeat ratios of
adjacent forwards. On a shared machine pin the process to one core (``taskset -c 1``)
and compare ratios, not milliseconds, between runs. The timed calls are ``densevit(x)``
and ``hf(pixel_values=x)`` (the comparison's reshapes are outside). The last column names
HF's attention implementation, its default (``sdpa``; ``eager`` for ViTDet, which has no
other); densevit's attention is ``F.scaled_dot_product_attention`` throughout, a
relative or decomposed bias passed to it as the mask.

Known differences of work, left as they are:

- Swin: densevit is built as HF ``SwinModel`` computes (``always_shift=False``: the 7x7
  last stage at 224² is not shifted; one output norm, the last stage's). densevit's
  dense-prediction default (``always_shift=True``, four output norms) does a little more.
- BEiT: HF resizes its relative-bias table to the input's grid at every forward, also at
  the config's size; ViTDet: both resize the 14 x 14 pre-training table to 32 x 32 at
  every forward (the released models' case: a 224² table, run at 1024²).
- ``vitdet`` / ``sam``: both pad the 32 x 32 grid to whole windows (42 x 42) for the
  windowed layers.

``--tiny``: the same pairs and input sizes, 2 layers of width 32 (Swin: width 16, two
blocks a stage) -- a quick end-to-end check (``tests/tools/test_bench_backbones.py``),
its times meaningless. ``--json FILE`` writes the printed rows (``max_rel_err`` and
``hf_attention`` included) with the command, commit, CPU and thread count
(``densevit.utils.provenance``).

(Peak memory against token count is not measured here yet: the process's ru_maxrss
high-water mark is set by building the model, not by the forward.)
"""
import argparse
import logging
import statistics
import sys
import time
from collections import namedtuple

import torch
from mmengine.logging import MMLogger
from torch import nn

from densevit.checkpoint.swin import convert_swin
from densevit.checkpoint.vit import convert_vit
from densevit.models.backbones.swin import SwinTransformer
from densevit.models.backbones.vit import VisionTransformer
from densevit.utils.provenance import add_json_argument, write_result
from densevit.utils.random_init import randomize_

MAX_REL_ERR = 1e-4
MODELS = ('vit', 'swin', 'dinov2', 'dinov2_reg', 'dinov3', 'beit', 'clip', 'vitdet', 'sam',
          'relpos')
# one pair: its label, input side, densevit model, HF forward (x -> HF output) and
# HF output -> its patch map [B, D, h, w]
Pair = namedtuple('Pair', 'label size ours hf_forward hf_map hf')


def timed(fn_a, fn_b, x, repeats, grad=False):
    """Forward times of two models, their runs interleaved (A B, then B A, ...).

    Timing one model's repeats and then the other's lets load from other processes
    (which drifts over seconds) fall on one side of the ratio; interleaving, with the
    order flipped every repeat, gives both the same share of it, and the ratio of each
    adjacent pair cancels what drifts slower than one pair.

    ``grad=True`` runs them with autograd on (training steps), else under ``no_grad``.

    Returns:
        (median seconds of A, median seconds of B, median of the per-repeat B / A).
    """
    times = ([], [])
    with torch.set_grad_enabled(grad):
        fn_a(x)  # warm-up
        fn_b(x)
        for r in range(repeats):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                t = time.perf_counter()
                (fn_a, fn_b)[i](x)
                times[i].append(time.perf_counter() - t)
    ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
    return statistics.median(times[0]), statistics.median(times[1]), ratio


def max_rel_err(a, b):
    """max |a - b| / max |b|, in float64."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ------------------------------------------------------------------ sizes
def dims(tiny):
    """(width, layers, heads, MLP width): ViT-B's, or 2 layers of width 32."""
    return (32, 2, 2, 128) if tiny else (768, 12, 12, 3072)


def hf_dims(tiny, mlp='intermediate_size'):
    D, L, H, F = dims(tiny)
    extra = {} if mlp is None else {mlp: F}
    return dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, **extra)


def arch(tiny):
    D, L, H, F = dims(tiny)
    return dict(embed_dims=D, num_layers=L, num_heads=H, feedforward_channels=F)


def global_layers(tiny):
    """The layers that attend globally among windowed ones (ViTDet-B / SAM-B: 2, 5, 8, 11)."""
    return (1,) if tiny else (2, 5, 8, 11)


def random_(hf):
    """Every saved tensor of ``hf`` random, at scales that keep 12 layers finite."""
    return randomize_(hf, seed=0, scale=0.1, fan_in=True).eval()


def tokens_to_map(extra, side, patch):
    """HF ``last_hidden_state`` [B, extra + h*w, D] -> its patches [B, D, h, w]."""
    g = side // patch

    def to_map(out):
        t = out.last_hidden_state[:, extra:]
        return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], g, g)
    return to_map


def _vit_pair(label, size, patch, extra, hf, **vit_kwargs):
    """``hf`` (random) converted into a densevit ViT built with ``vit_kwargs``."""
    hf = random_(hf)
    ours = VisionTransformer(img_size=size, patch_size=patch, **vit_kwargs).eval()
    ours.load_state_dict(convert_vit(hf.state_dict(), strict=True), strict=True)
    return Pair(label, size, ours, lambda x: hf(pixel_values=x),
                tokens_to_map(extra, size, patch), hf)


# ------------------------------------------------------------------ the pairs
def vit_pair(tiny, size):
    from transformers import ViTConfig, ViTModel
    hf = ViTModel(ViTConfig(image_size=size, layer_norm_eps=1e-6, **hf_dims(tiny)),
                  add_pooling_layer=False)
    return _vit_pair('ViT-B/16', size, 16, 1, hf, arch=arch(tiny))


def swin_pair(tiny):
    from transformers import SwinConfig, SwinModel
    width, depths, heads = (16, [2, 2, 2, 2], [1, 2, 2, 4]) if tiny else \
        (96, [2, 2, 6, 2], [3, 6, 12, 24])
    hf = random_(SwinModel(SwinConfig(embed_dim=width, depths=depths, num_heads=heads,
                                      window_size=7, image_size=224), add_pooling_layer=False))
    ours = SwinTransformer(arch=dict(embed_dims=width, depths=depths, num_heads=heads),
                           drop_path_rate=0.0, always_shift=False, out_indices=(3,)).eval()
    ours.load_state_dict(convert_swin(hf.state_dict(), strict=True), strict=True)
    return Pair('Swin-T', 224, ours, lambda x: hf(pixel_values=x),
                tokens_to_map(0, 224, 32), hf)


def dinov2_pair(tiny, registers):
    import transformers
    kind = 'Dinov2WithRegisters' if registers else 'Dinov2'
    extra = dict(num_register_tokens=registers) if registers else {}
    cfg = getattr(transformers, kind + 'Config')(image_size=224, patch_size=14,
                                                 **hf_dims(tiny, mlp=None), **extra)
    label = 'DINOv2 ViT-B/14' + (f' + {registers} registers' if registers else '')
    return _vit_pair(label, 224, 14, 1 + registers, getattr(transformers, kind + 'Model')(cfg),
                     arch=arch(tiny), num_register_tokens=registers, layer_scale_init_value=1.0,
                     interpolate_mode='bicubic_antialias' if registers else 'bicubic',
                     crop_to_patch=True)


def dinov3_pair(tiny):
    from transformers import DINOv3ViTConfig, DINOv3ViTModel
    hf = DINOv3ViTModel(DINOv3ViTConfig(image_size=224, patch_size=16, num_register_tokens=4,
                                        use_gated_mlp=False, key_bias=False, **hf_dims(tiny)))
    return _vit_pair('DINOv3 ViT-B/16', 224, 16, 5, hf, arch=arch(tiny),
                     pos_embed=dict(type='rope', convention='dinov3'), num_register_tokens=4,
                     qkv_bias=(True, False, True), layer_scale_init_value=1.0, ffn_type='mlp',
                     layer_norm_eps=1e-5, crop_to_patch=True)


def beit_pair(tiny):
    from transformers import BeitConfig, BeitModel
    hf = BeitModel(BeitConfig(image_size=224, patch_size=16, use_relative_position_bias=True,
                              use_mean_pooling=False, **hf_dims(tiny)), add_pooling_layer=False)
    return _vit_pair('BEiT-B/16', 224, 16, 1, hf, arch=arch(tiny),
                     qkv_bias=(True, False, True), layer_scale_init_value=0.1,
                     layer_norm_eps=1e-12, pos_embed=dict(type='relative'),
                     interpolate_mode='bilinear', crop_to_patch=True)


def clip_pair(tiny):
    from transformers import CLIPVisionConfig, CLIPVisionModel
    hf = CLIPVisionModel(CLIPVisionConfig(image_size=224, patch_size=16,
                                          hidden_act='quick_gelu', **hf_dims(tiny)))
    return _vit_pair('CLIP ViT-B/16', 224, 16, 1, hf, arch=arch(tiny), pre_norm=True,
                     final_norm=False, act_cfg=dict(type='QuickGELU'), layer_norm_eps=1e-5,
                     crop_to_patch=True)


def _windowed(tiny):
    """densevit's ViTDet-style ViT options (no class token, windows of 14, global layers)."""
    return dict(arch=arch(tiny), with_cls_token=False, final_norm=False, window_size=14,
                global_attn_indexes=global_layers(tiny), decomposed_rel_pos=True)


def vitdet_pair(tiny):
    from transformers import VitDetConfig, VitDetModel
    windowed = [i for i in range(dims(tiny)[1]) if i not in global_layers(tiny)]
    hf = VitDetModel(VitDetConfig(image_size=512, pretrain_image_size=224, patch_size=16,
                                  window_size=14, window_block_indices=windowed,
                                  use_relative_position_embeddings=True,
                                  **hf_dims(tiny, mlp=None)))
    pair = _vit_pair('ViTDet ViT-B/16', 512, 16, 0, hf, pos_grid=(14, 14), **_windowed(tiny))
    return pair._replace(hf_map=lambda out: out.last_hidden_state)  # a map already


def sam_pair(tiny):
    from transformers import SamVisionConfig, SamVisionModel
    hf = random_(SamVisionModel(SamVisionConfig(
        image_size=512, patch_size=16, window_size=14, global_attn_indexes=global_layers(tiny),
        output_channels=16 if tiny else 256, **hf_dims(tiny, mlp='mlp_dim'))))
    ours = VisionTransformer(img_size=512, patch_size=16, **_windowed(tiny)).eval()
    ours.load_state_dict(convert_vit(hf.state_dict(), strict=True), strict=True)
    hf.vision_encoder.neck = nn.Identity()  # its last layer's output [B, h, w, D]
    return Pair('SAM ViT-B/16 encoder', 512, ours, lambda x: hf(pixel_values=x),
                lambda out: out.last_hidden_state.permute(0, 3, 1, 2), hf)


def pairs(name, tiny):
    """The pairs of one ``--models`` name (built one at a time: a generator)."""
    if name == 'vit':
        yield vit_pair(tiny, 224)
        yield vit_pair(tiny, 512)
    elif name == 'dinov2':
        yield dinov2_pair(tiny, 0)
    elif name == 'dinov2_reg':
        yield dinov2_pair(tiny, 4)
    else:
        yield dict(swin=swin_pair, dinov3=dinov3_pair, beit=beit_pair, clip=clip_pair,
                   vitdet=vitdet_pair, sam=sam_pair)[name](tiny)


def relative_position(tiny, repeats):
    """The relative-position ViT-B/16's forward time against the plain one's at 224²."""
    plain = VisionTransformer(arch=arch(tiny), img_size=224).eval()
    rel = VisionTransformer(arch=arch(tiny), img_size=224,
                            pos_embed=dict(type='relative', placement='every_layer')).eval()
    a, b, ratio = timed(plain, rel, torch.randn(1, 3, 224, 224), repeats)
    print(f'\nrelative-position ViT-B/16 forward at 224²: {b * 1e3:.1f} ms vs plain '
          f'{a * 1e3:.1f} ms = {ratio:.2f}x')
    return dict(input=224, plain_ms=a * 1e3, relative_ms=b * 1e3, relative_over_plain=ratio)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('--models', nargs='+', choices=MODELS, default=list(MODELS),
                   help='pairs to run, in the order given (default: all)')
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--tiny', action='store_true',
                   help='2 layers of width 32: a quick end-to-end check (times meaningless)')
    add_json_argument(p)
    args = p.parse_args()
    MMLogger.get_current_instance().setLevel(logging.WARNING)  # not the converters' INFO lines
    print(f'torch threads: {torch.get_num_threads()}' + ('; --tiny sizes' if args.tiny else ''))
    print('| model | input | max rel err | densevit (ms) | HF transformers (ms) | '
          'HF / densevit | HF attention |')
    print('|---|---|---|---|---|---|---|')
    rows, failed = [], []
    for name in (m for m in args.models if m != 'relpos'):
        for pair in pairs(name, args.tiny):
            torch.manual_seed(0)
            x = torch.randn(1, 3, pair.size, pair.size)
            with torch.no_grad():
                err = max_rel_err(pair.ours(x)[-1], pair.hf_map(pair.hf_forward(x)))
            row = dict(model=pair.label, input=pair.size, max_rel_err=err, densevit_ms=None,
                       hf_ms=None, hf_over_densevit=None,
                       hf_attention=pair.hf.config._attn_implementation)
            if err <= MAX_REL_ERR:
                a, b, ratio = timed(pair.ours, pair.hf_forward, x, args.repeats)
                row.update(densevit_ms=a * 1e3, hf_ms=b * 1e3, hf_over_densevit=ratio)
                times = f'{a * 1e3:.1f} | {b * 1e3:.1f} | {ratio:.2f}'
            else:
                failed.append(pair.label)
                times = f'not timed: outputs differ (> {MAX_REL_ERR:g}) | | '
            rows.append(row)
            print(f'| {pair.label} | {pair.size}² | {err:.1e} | {times} | '
                  f'{row["hf_attention"]} |', flush=True)
            del pair
    results = dict(vs_hf=rows, tiny=args.tiny)
    if 'relpos' in args.models:
        torch.manual_seed(0)
        results['relative_position'] = relative_position(args.tiny, args.repeats)
    if args.json:
        write_result(args.json, results, repeats=args.repeats)
    if failed:
        print(f'outputs differ from HF\'s by more than {MAX_REL_ERR:g} (relative): '
              f'{", ".join(failed)}', file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
