"""tools/analysis/get_flops.py against counts written out by hand, and the papers' tables.

Convention (fvcore's and the papers'): one multiply-accumulate is one FLOP; a k x k
convolution from Cin to Cout channels with an output of P pixels is Cin*Cout*k*k*P (no
bias), a Linear Cin*Cout per token, attention L*S*(E + Ev) per head; LayerNorm 5 per
element, BatchNorm at inference 2, bilinear upsampling 4 per output element; additions,
activations and softmax 0. The hand counts below are exact (integers) at the sizes run.

The papers' figures, and what they count:

- ViT-B/16 at 224: 17.6 G (DeiT's table, fvcore), the bare backbone (no classifier).
- SegFormer-B0 at 512: 8.4 G (Table 1 / 7). The paper's head upsamples the projected maps,
  concatenates them and fuses with a 1x1 convolution (1024 -> 256 channels at 128 x 128,
  4.29 G); densevit's ``SegformerHead`` computes the same function with the fuse weight
  applied per map at each map's own size (1.43 G), so the tool counts 5.62 G for what
  runs; the paper's form (with this config's conv-BN-ReLU projections), counted the same
  way, is 8.49 G, within 1.5% of 8.4 (the paper's counter, mmcv's module hooks plus the
  attention products added by hand, weighs norms, upsampling and biases differently).
- DETR-R50: 86 G (Table 1) is an average over the first 100 COCO val2017 images resized
  to a shorter side of 800 (longer at most 1333), so it depends on their aspect ratios: a
  4:3 image (640 x 480 -> 800 x 1066) counts 81.3 G, a 3:2 one (640 x 427 -> 800 x 1199)
  91.2 G; 800 x 1130, between the two, counts 86.2 G.
"""
import re

import pytest
import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from densevit.apis import init_model
from densevit.models.layers.conv_norm import conv_norm
from densevit.models.layers.frozen_bn import FrozenBatchNorm2d

from tiny_run import REPO, load_tool

LN, BN, UP = 5, 2, 4  # FLOPs per element: LayerNorm, BatchNorm at inference, bilinear upsampling


@pytest.fixture(scope='module')
def tool():
    return load_tool('tools/analysis/get_flops.py')


def conv(cin, cout, k, pixels, groups=1):
    """MACs of a k x k convolution with an output of ``pixels`` pixels."""
    return cin // groups * cout * k * k * pixels


def out(n, k, s, p):
    """Output size of a k x k window at stride s with padding p."""
    return (n + 2 * p - k) // s + 1


def vit_b16(h, w, D=768, L=12, F=3072):
    """Patch embedding, L pre-norm blocks (qkv, proj, 2-layer MLP, attention), final LN."""
    n = (h // 16) * (w // 16)
    t = n + 1  # class token
    block = t * D * (3 * D + D + 2 * F) + t * t * 2 * D + 2 * LN * t * D
    return conv(3, D, 16, n) + L * block + LN * t * D


def mit_b0(h, w):
    """Mix Transformer B0: (total, [(channels, pixels)] of the four maps)."""
    total, cin, maps = 0, 3, []
    for C, sr, k, s in ((32, 8, 7, 4), (64, 4, 3, 2), (160, 2, 3, 2), (256, 1, 3, 2)):
        h, w = out(h, k, s, k // 2), out(w, k, s, k // 2)
        n, m = h * w, (h // sr) * (w // sr)  # queries, keys after the spatial reduction
        total += conv(cin, C, k, n) + LN * n * C  # overlapping patch embedding
        reduce = conv(C, C, sr, m) + LN * m * C if sr > 1 else 0
        attn = n * C * C + reduce + m * C * 2 * C + n * m * 2 * C + n * C * C  # q, kv, QK^T/AV, proj
        ffn = n * C * 4 * C + conv(4 * C, 4 * C, 3, n, groups=4 * C) + n * 4 * C * C
        total += 2 * (LN * n * C + attn + LN * n * C + ffn) + LN * n * C
        cin = C
        maps.append((C, n))
    return total, maps


def segformer_head(maps, C=256, K=150, paper=False):
    """conv-BN-ReLU projections, then either the paper's upsample-concatenate-fuse or
    densevit's per-map fuse block (C x C at each map's size) upsampled and summed; BN,
    classifier. The first map is at the output size and is not resized."""
    n0, rest = maps[0][1], len(maps) - 1
    total = sum(conv(c, C, 1, n) + BN * C * n for c, n in maps)
    if paper:
        total += rest * UP * C * n0 + conv(len(maps) * C, C, 1, n0)
    else:
        total += sum(C * C * n for _, n in maps) + rest * UP * C * n0
    return total + BN * C * n0 + conv(C, K, 1, n0)


def resnet50(h, w):
    """ResNet-50 (pytorch style: stride on the 3x3), its convolutions folded with their
    frozen norms: (total, pixels of the stride-32 map)."""
    h, w = out(h, 7, 2, 3), out(w, 7, 2, 3)
    total = conv(3, 64, 7, h * w)
    h, w = out(h, 3, 2, 1), out(w, 3, 2, 1)  # max pool
    cin = 64
    for mid, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            ho, wo = out(h, 3, s, 1), out(w, 3, s, 1)
            total += (conv(cin, mid, 1, h * w) + conv(mid, mid, 3, ho * wo)
                      + conv(mid, 4 * mid, 1, ho * wo))
            if b == 0:
                total += conv(cin, 4 * mid, 1, ho * wo)  # downsample
            cin, h, w = 4 * mid, ho, wo
    return total, h * w


def detr_r50(h, w, D=256, F=2048, Q=100, L=6, K1=81):
    """ResNet-50, input projection, 6 + 6 post-norm layers, class and box heads on all six
    decoder outputs."""
    total, n = resnet50(h, w)
    total += conv(2048, D, 1, n) + n  # input projection; the padding mask resized (nearest)
    total += L * (n * D * 4 * D + n * n * 2 * D + 2 * n * D * F + 2 * LN * n * D)
    cross = 2 * Q * D * D + 2 * n * D * D + Q * n * 2 * D  # q, out; k, v of the memory
    total += L * (Q * D * 4 * D + Q * Q * 2 * D + cross + 2 * Q * D * F + 4 * LN * Q * D)
    return total + L * Q * D * (K1 + 2 * D + 4)


class FoldedBlock(nn.Module):
    """A convolution + frozen norm run as one ``F.conv2d`` (``layers/conv_norm.py``), in a
    module of a type no counter knows."""

    def __init__(self, norm, cin=8, cout=16):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.norm = norm

    def forward(self, x):
        return conv_norm(self.conv, self.norm, x)


@pytest.mark.parametrize('norm', [FrozenBatchNorm2d(16), nn.BatchNorm2d(16).eval()],
                         ids=['FrozenBN', 'BN-eval'])
def test_folded_conv_norm_counts_its_convolution(tool, norm):
    block = FoldedBlock(norm).eval()
    model = nn.Sequential(nn.Conv2d(3, 8, 1, bias=False), block)  # the tool feeds 3 channels
    folded = tool.complexity(model, (20, 30), table=False)
    hand = conv(3, 8, 1, 20 * 30) + conv(8, 16, 3, 10 * 15)  # Cin*Cout*k*k*H'*W'
    assert folded['flops'] == hand
    assert folded['by_operator'] == {'conv': hand}  # no norm left to count
    with torch.no_grad(), FlopCounterMode(display=False) as dispatched:  # torch's own count
        block(torch.randn(1, 8, 20, 30))
    assert dispatched.get_total_flops() == 2 * conv(8, 16, 3, 10 * 15)  # 2 FLOPs per MAC
    # the same block unfolded (mmcv's ConvModule, BN at inference) adds only the norm
    unfolded = ConvModule(3, 16, 3, stride=2, padding=1, norm_cfg=dict(type='BN'),
                          act_cfg=None).eval()
    counted = tool.complexity(unfolded, (20, 30), table=False)
    assert counted['by_operator'] == {'conv': conv(3, 16, 3, 10 * 15),
                                      'batch_norm': BN * 16 * 10 * 15}


def test_vit_b16_224_bare_backbone_config(tool, capsys):
    # configs/analysis/vit-b16_224.py builds a bare VisionTransformer: its forward has no
    # mode argument (the tool used to fail on it with a TypeError)
    assert tool.main([str(REPO / 'configs/analysis/vit-b16_224.py'), '--shape', '224', '224',
                      '--by-operator']) == 0
    printed = capsys.readouterr().out
    flops = int(re.search(r'FLOPs: \S+ \(([\d,]+)\)', printed).group(1).replace(',', ''))
    assert flops == vit_b16(224, 224) == 17_581_972_224
    assert abs(flops / 1e9 - 17.6) < 0.05  # 17.6 G, as the table rounds it
    assert 'scaled_dot_product_attention' in printed


def test_segformer_b0_512_counts_what_runs_and_the_paper_form(tool):
    model = init_model(REPO / 'configs/segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py')
    encoder, maps = mit_b0(512, 512)
    info = tool.complexity(model, (512, 512), table=False)
    assert info['flops'] == encoder + segformer_head(maps) == 5_619_908_608
    assert info['by_operator']['matmul'] == sum(256 * 256 * n for _, n in maps)  # fuse, per map
    assert 'batch_norm' in info['by_operator']

    class PaperHead(nn.Module):  # upsample, concatenate (deepest first), fuse, classify
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            head = self.model.decode_head
            feats = head._select_inputs(self.model.extract_feat(x))
            size = feats[0].shape[-2:]
            ups = [proj(f) if i == 0 else F.interpolate(proj(f), size=size, mode='bilinear')
                   for i, (proj, f) in enumerate(zip(head.linear_projs, feats, strict=True))]
            return head.cls_seg(head.fuse(torch.cat(ups[::-1], 1)))

    paper = tool.complexity(PaperHead(model), (512, 512), table=False)
    assert paper['flops'] == encoder + segformer_head(maps, paper=True)
    assert paper['by_operator']['conv'] - info['by_operator']['conv'] == conv(1024, 256, 1, 128 ** 2)
    assert abs(paper['flops'] / 8.4e9 - 1) < 0.015  # the paper's 8.4 G (8.49 G here)


def test_detr_r50_at_the_paper_sizes(tool):
    model = init_model(REPO / 'configs/detr_resnet50.py')
    info = tool.complexity(model, (800, 1130), table=False)
    assert info['flops'] == detr_r50(800, 1130)
    assert abs(info['flops'] / 86e9 - 1) < 0.01  # Table 1: 86 G, an average over images
    backbone, _ = resnet50(800, 1130)
    assert info['by_operator']['conv'] == backbone + conv(2048, 256, 1, 25 * 36)
    # the images it averages over: 4:3 and 3:2 COCO images bracket the 86 G
    assert detr_r50(800, 1066) / 1e9 == pytest.approx(81.26, abs=0.01)
    assert detr_r50(800, 1199) / 1e9 == pytest.approx(91.16, abs=0.01)
